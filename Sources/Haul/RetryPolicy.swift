import Foundation

/// When and how soon a failed transfer is tried again.
///
/// Delays grow exponentially from ``baseDelay`` and are capped by ``maximumDelay``; each is then spread by
/// ``jitter`` (a random factor in `1 - jitter ... 1`), so that many transfers that failed together do not return
/// together. With the defaults (5 attempts in all, base 1 s, factor 2, cap 30 s, jitter 0.5):
///
/// | after attempt | delay before the next |
/// |---|---|
/// | 1 | 0.5 – 1 s |
/// | 2 | 1 – 2 s |
/// | 3 | 2 – 4 s |
/// | 4 | 4 – 8 s |
/// | 5 | none: the transfer fails |
///
/// A `Retry-After` header (seconds or an HTTP date) on a 429 or 503 replaces the computed delay, capped by
/// ``maximumRetryAfter``, and holds every transfer to that host for that long (politeness), not only this one.
///
/// Transient failures are retried: connections refused or reset, timeouts, bodies cut short, a transfer that another
/// process sharing the store is downloading, and the statuses 408, 429, 500, 502, 503 and 504. Permanent ones are not: other 4xx, checksum and size mismatches after a full download,
/// invalid requests, and file-system errors.
public struct RetryPolicy: Sendable, Hashable {
    /// How many attempts a transfer gets in all, the first included. 1 means no retry. Default 5, as most
    /// download managers give a handful of tries: enough to ride out a restart of a server, not so many that a dead
    /// link holds a batch for minutes.
    public var maximumAttempts: Int = 5
    /// The delay after the first failure, before jitter. Default 1 s.
    public var baseDelay: Duration = .seconds(1)
    /// The factor by which each delay grows. Default 2.
    public var multiplier: Double = 2
    /// The longest computed delay. Default 30 s.
    public var maximumDelay: Duration = .seconds(30)
    /// The fraction by which a delay may be shortened at random, in 0...1. Default 0.5.
    public var jitter: Double = 0.5
    /// The longest `Retry-After` honoured; a longer one is cut to this. Default 5 minutes: long enough for the
    /// rate limits of public APIs, short enough that a batch does not wait on a server that asks for an hour.
    public var maximumRetryAfter: Duration = .seconds(300)

    /// The defaults described above.
    public init() {}

    /// A policy that never retries.
    public static var never: RetryPolicy {
        var policy = RetryPolicy()
        policy.maximumAttempts = 1
        return policy
    }

    /// Whether an error is worth another attempt.
    public static func isTransient(_ error: HaulError) -> Bool {
        switch error.code {
        case .connectionFailed, .timedOut, .incompleteBody, .leasedElsewhere:
            return true
        case .httpStatus:
            return [408, 429, 500, 502, 503, 504].contains(error.httpStatus ?? 0)
        default:
            return false
        }
    }

    /// The delay before the attempt after `attempt` (counted from 1), or `nil` when there is none.
    ///
    /// - Parameters:
    ///   - random: a value in 0...1 that picks the jitter (injected so that tests are deterministic).
    func delay(
        afterAttempt attempt: Int,
        failingWith error: HaulError,
        retryAfter: Duration?,
        random: Double
    ) -> Duration? {
        guard attempt < self.maximumAttempts, Self.isTransient(error) else { return nil }
        if let retryAfter { return min(max(retryAfter, .zero), self.maximumRetryAfter) }
        let exponential = self.baseDelay.seconds * pow(self.multiplier, Double(attempt - 1))
        let capped = min(exponential, self.maximumDelay.seconds)
        let spread = capped * (1 - self.jitter * min(max(random, 0), 1))
        return .milliseconds(Int64((spread * 1000).rounded()))
    }
}

/// The `Retry-After` header (RFC 9110 §10.2.3): a number of seconds or an HTTP date.
enum RetryAfter {
    /// The delay the header asks for, measured from `now`; `nil` when it is malformed. A date in the past is zero.
    static func delay(_ header: String, now: Date) -> Duration? {
        let text = header.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            guard text.count <= 9, let seconds = Int64(text) else { return nil }
            return .seconds(seconds)
        }
        guard let date = self.httpDate(text) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
    }

    static func httpDate(_ text: String) -> Date? { HTTPDate.parse(text) }
}
