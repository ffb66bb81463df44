import NIOConcurrencyHelpers

/// A token bucket: how long to wait before using bytes so that, over time, no more than `bytesPerSecond` pass.
///
/// Pure: the caller supplies the clock readings. The bucket holds at most ``burst`` bytes of credit: half a second at
/// the rate, at least 64 KiB. That is smooth at the scale of a progress bar, and it gives back the time a busy
/// machine oversleeps, so the average holds even when wake-ups come late.
struct TokenBucket: Sendable {
    private(set) var bytesPerSecond: Int64
    private var tokens: Double
    private var last: ContinuousClock.Instant

    init(bytesPerSecond: Int64, now: ContinuousClock.Instant) {
        self.bytesPerSecond = max(1, bytesPerSecond)
        self.tokens = 0
        self.last = now
    }

    /// The most credit the bucket holds.
    var burst: Double { max(Double(self.bytesPerSecond) / 2, 65_536) }

    /// Takes `bytes` from the bucket at `now`; returns how long to wait before using them.
    mutating func take(_ bytes: Int, at now: ContinuousClock.Instant) -> Duration {
        let elapsed = max(0, (now - self.last).seconds)
        self.last = now
        self.tokens = min(self.burst, self.tokens + elapsed * Double(self.bytesPerSecond))
        self.tokens -= Double(bytes)
        guard self.tokens < 0 else { return .zero }
        return .milliseconds(Int64((-self.tokens / Double(self.bytesPerSecond) * 1000).rounded(.up)))
    }

    /// Changes the rate from now on.
    mutating func setRate(_ bytesPerSecond: Int64) {
        self.bytesPerSecond = max(1, bytesPerSecond)
        self.tokens = min(self.tokens, self.burst)
    }
}

/// A bandwidth limit shared by every transfer of a manager (or held by one transfer), changeable while they run.
final class BandwidthLimiter: Sendable {
    private let bucket: NIOLockedValueBox<TokenBucket?>

    init(bytesPerSecond: Int64?) {
        self.bucket = NIOLockedValueBox(bytesPerSecond.map { TokenBucket(bytesPerSecond: $0, now: .now) })
    }

    /// Takes `bytes` from the limit now; returns how long to wait before using them (zero without a limit).
    func delay(for bytes: Int) -> Duration {
        self.bucket.withLockedValue { $0?.take(bytes, at: .now) } ?? .zero
    }

    /// Sets, changes or (with `nil`) removes the limit.
    func setLimit(_ bytesPerSecond: Int64?) {
        self.bucket.withLockedValue { bucket in
            guard let bytesPerSecond else {
                bucket = nil
                return
            }
            if bucket == nil {
                bucket = TokenBucket(bytesPerSecond: bytesPerSecond, now: .now)
            } else {
                bucket!.setRate(bytesPerSecond)
            }
        }
    }
}
