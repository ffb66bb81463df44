/// Where a transfer is in its lifecycle.
///
/// ```
/// waiting ──▶ running ──▶ completed
///    ▲  │     ▲  │  └────▶ failed
///    │  │     │  ▼
///    │  │  waitingToRetry (a transient failure; after the back-off delay it queues again)
///    │  ▼        ▼
///    paused ◀────┘        (any unfinished state) ──cancel──▶ cancelled
/// waiting ──(conflict policy .skip, file exists)──▶ skipped
/// ```
///
/// New states can arrive in minor releases (the retry issue adds one), so this is a struct: compare with `==`.
public struct TransferState: Hashable, Sendable, CustomStringConvertible {
    private enum Base: String, Hashable, Sendable {
        case waiting, running, waitingToRetry, paused, completed, failed, cancelled, skipped
    }
    private let base: Base
    private init(_ base: Base) { self.base = base }

    /// Queued, waiting for a free slot under the concurrency limits.
    public static let waiting = TransferState(.waiting)
    /// A request is in flight: connecting, or receiving the body.
    public static let running = TransferState(.running)
    /// An attempt failed transiently; the next starts after a delay (see ``RetryPolicy``).
    public static let waitingToRetry = TransferState(.waitingToRetry)
    /// Paused by the caller; the partial file is kept, and resuming continues from it.
    public static let paused = TransferState(.paused)
    /// The file is complete, verified and in its final place.
    public static let completed = TransferState(.completed)
    /// The transfer stopped with an error.
    public static let failed = TransferState(.failed)
    /// The transfer was cancelled; its partial file was removed.
    public static let cancelled = TransferState(.cancelled)
    /// Not downloaded: the destination existed and the conflict policy is ``ConflictPolicy/skip``.
    public static let skipped = TransferState(.skipped)

    /// Whether the transfer has ended (completed, failed, cancelled or skipped) and will not change again.
    public var isFinished: Bool {
        switch self.base {
        case .completed, .failed, .cancelled, .skipped: true
        case .waiting, .running, .waitingToRetry, .paused: false
        }
    }

    /// The state named `name` (as ``description`` writes it, and as the store records it).
    public init?(name: String) {
        guard let base = Base(rawValue: name) else { return nil }
        self.base = base
    }

    /// Whether a request is in flight or the transfer is queued for one (waiting, running, waiting to retry).
    public var isActive: Bool {
        switch self.base {
        case .waiting, .running, .waitingToRetry: true
        case .paused, .completed, .failed, .cancelled, .skipped: false
        }
    }

    /// The state's name: `waiting`, `running`, `waitingToRetry`, `paused`, `completed`, `failed`, `cancelled`,
    /// `skipped`.
    public var description: String { self.base.rawValue }
}
