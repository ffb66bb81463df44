import Foundation

/// Something that happened to one transfer.
public struct TransferEvent: Sendable {
    /// What happened.
    public enum Kind: Sendable {
        /// The transfer was accepted and waits for a slot.
        case queued
        /// A request was sent; `offset` is where the body continues (0 for a fresh start).
        case started(offset: Int64)
        /// More bytes arrived (coalesced: at most one per transfer per progress interval, and always a last one).
        case progressed(TransferProgress)
        /// The transfer was paused; its partial file is kept.
        case paused
        /// A paused transfer was resumed and waits for a slot.
        case resumed
        /// An attempt failed transiently; the next starts after `delay`.
        case retrying(attempt: Int, delay: Duration, error: HaulError)
        /// The partial file could not be continued and the download starts again from zero; says why.
        case restarted(reason: String)
        /// The transfer finished with this result.
        case finished(TransferResult)
    }

    /// The transfer.
    public var id: TransferID
    /// Its URL.
    public var url: URL
    /// What happened.
    public var kind: Kind

    /// Creates an event (for tests and adapters; the manager makes its own).
    public init(id: TransferID, url: URL, kind: Kind) {
        self.id = id
        self.url = url
        self.kind = kind
    }
}

/// Something that happened in a batch: an event of one of its transfers, a progress update, or its end.
public enum BatchEvent: Sendable {
    /// An event of one of the batch's transfers.
    case transfer(TransferEvent)
    /// The batch's progress changed (coalesced to the progress interval; the last one always comes).
    case progressed(BatchProgress)
    /// Every transfer of the batch has finished; this is the last event.
    case finished(BatchReport)
}

extension BatchEvent {
    /// Which of a batch's events a stream carries (see ``Batch/events(_:)``). The batch's end,
    /// ``BatchEvent/finished(_:)``, always comes. A narrower selection costs less: events it leaves out are never
    /// queued, and the task that iterates the stream is not woken for them.
    public struct Selection: Sendable, Hashable {
        private enum Scope: Hashable { case all, lifecycle, results, failures }
        private let scope: Scope

        /// Every event: each transfer's, the batch's progress, and its end.
        public static let all = Selection(scope: .all)
        /// Each transfer's start, restarts, retries, pauses, resumptions and last event (not its queueing nor its
        /// progress), the batch's progress, and the end: what `haul get` prints in a pipe or a log.
        public static let lifecycle = Selection(scope: .lifecycle)
        /// Each transfer's last event (``TransferEvent/Kind/finished(_:)``, whatever the result), and the end.
        public static let results = Selection(scope: .results)
        /// The last event of each transfer that failed, and the end: what `haul get --quiet` prints.
        public static let failures = Selection(scope: .failures)

        /// Whether a transfer's event of this kind is carried.
        func includes(_ kind: TransferEvent.Kind) -> Bool {
            switch (self.scope, kind) {
            case (.all, _): true
            case (.lifecycle, .queued), (.lifecycle, .progressed): false
            case (.lifecycle, _): true
            case (.results, .finished): true
            case (.failures, .finished(let result)): result.state == .failed
            case (.results, _), (.failures, _): false
            }
        }

        /// Whether the batch's progress events are carried.
        var includesProgress: Bool { self.scope == .all || self.scope == .lifecycle }
    }
}
