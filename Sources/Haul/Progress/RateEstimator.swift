/// A speed as an exponentially weighted moving average of byte counts over time.
///
/// Each sample's weight decays with a time constant of ``timeConstant`` (default 3 seconds: long enough to smooth
/// the bursts of a 100 ms progress interval, short enough to follow a real change of speed within a few seconds).
/// Pure: the caller supplies the clock readings.
struct RateEstimator: Hashable, Sendable {
    /// How quickly old samples fade.
    var timeConstant: Duration = .seconds(3)
    private var lastBytes: Int64?
    private var lastInstant: ContinuousClock.Instant?
    private(set) var bytesPerSecond: Double = 0

    init(timeConstant: Duration = .seconds(3)) { self.timeConstant = timeConstant }

    /// Records that `totalBytes` had been received by `instant`.
    mutating func record(totalBytes: Int64, at instant: ContinuousClock.Instant) {
        defer {
            self.lastBytes = totalBytes
            self.lastInstant = instant
        }
        guard let lastBytes = self.lastBytes, let lastInstant = self.lastInstant else { return }
        let elapsed = (instant - lastInstant).seconds
        guard elapsed > 0 else { return }
        let rate = Double(max(0, totalBytes - lastBytes)) / elapsed
        if self.bytesPerSecond == 0 {
            self.bytesPerSecond = rate
        } else {
            let weight = 1 - exp(-elapsed / self.timeConstant.seconds)
            self.bytesPerSecond += weight * (rate - self.bytesPerSecond)
        }
    }
}

extension Duration {
    /// The duration in seconds as a `Double`.
    var seconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
