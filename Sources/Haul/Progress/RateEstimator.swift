/// A speed as an exponentially weighted moving average of byte counts over time.
///
/// Each interval between two readings counts with a weight that grows with its length and fades with a time
/// constant of ``timeConstant`` (default 3 seconds: long enough to smooth the bursts of a 100 ms progress interval,
/// short enough to follow a real change of speed within a few seconds). The average starts from nothing and is divided
/// by the weight it has gathered (a bias-corrected average), so that in its first seconds it is the bytes received
/// over the time taken, not the first interval's rate: a reading a few microseconds after another, with a whole
/// file's bytes between them (a file that just completed), once set the speed to gibibytes per second, which then took
/// seconds to fade (the command showed 3.66 GiB/s at 50 MiB/s, and 0.0s left). Pure: the caller supplies the clock
/// readings.
struct RateEstimator: Hashable, Sendable {
    /// How quickly old samples fade.
    var timeConstant: Duration = .seconds(3)
    private var lastBytes: Int64?
    private var lastInstant: ContinuousClock.Instant?
    /// The weighted sum of the intervals' rates, and the sum of their weights (each `1 - e^(-interval / constant)`,
    /// the older ones faded): their quotient is the average.
    private var weightedRate: Double = 0
    private var weight: Double = 0

    init(timeConstant: Duration = .seconds(3)) { self.timeConstant = timeConstant }

    /// How long the readings must span before there is a speed to give: one progress interval. Over the first
    /// milliseconds the speed is noise (a batch's first reading with two files done took 3 GiB/s).
    static let minimumSpan: Duration = .milliseconds(100)

    /// The average speed, in bytes per second (0, unknown, until the readings span ``minimumSpan``).
    var bytesPerSecond: Double {
        guard self.weight >= 1 - exp(-Self.minimumSpan.seconds / self.timeConstant.seconds) * (1 + 1e-12) else {
            return 0
        }
        return self.weightedRate / self.weight
    }

    /// Records that `totalBytes` had been received by `instant`.
    mutating func record(totalBytes: Int64, at instant: ContinuousClock.Instant) {
        guard let lastBytes = self.lastBytes, let lastInstant = self.lastInstant else {
            self.lastBytes = totalBytes
            self.lastInstant = instant
            return
        }
        let elapsed = (instant - lastInstant).seconds
        guard elapsed > 0 else {
            // The same instant: the bytes count in the next interval.
            return
        }
        let rate = Double(max(0, totalBytes - lastBytes)) / elapsed
        let weight = 1 - exp(-elapsed / self.timeConstant.seconds)
        self.weightedRate += weight * (rate - self.weightedRate)
        self.weight += weight * (1 - self.weight)
        self.lastBytes = totalBytes
        self.lastInstant = instant
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
