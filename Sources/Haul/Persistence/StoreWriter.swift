import Foundation
import NIOConcurrencyHelpers

/// Writes the manager's changes to the store behind it: operations queue in memory (cheap, under the manager's
/// lock) and reach the database in one transaction every ``flushInterval``, so no database I/O ever happens under
/// the lock or per chunk. A change is on disk at most one interval after it happened; the partial files themselves
/// are the truth for how many bytes are there.
final class StoreWriter: Sendable {
    /// How often queued changes are written. 100 ms: a killed process loses at most that much bookkeeping, and
    /// nothing of the files.
    static let flushInterval: Duration = .milliseconds(100)

    let store: TransferStore
    private let pending = NIOLockedValueBox<[StoreOperation]>([])
    private let lastErrorBox = NIOLockedValueBox<(any Error)?>(nil)

    init(store: TransferStore) { self.store = store }

    /// Queues an operation.
    func enqueue(_ operation: StoreOperation) {
        self.pending.withLockedValue { $0.append(operation) }
    }

    /// Writes what is queued now, and then `last`, in one transaction.
    func flush(adding last: StoreOperation? = nil) {
        var operations = self.pending.withLockedValue { pending in
            defer { pending = [] }
            return pending
        }
        if let last { operations.append(last) }
        do {
            try self.store.apply(operations)
        } catch {
            self.lastErrorBox.withLockedValue { $0 = error }
        }
    }

    /// The last error writing to the store, if any.
    var lastError: (any Error)? { self.lastErrorBox.withLockedValue { $0 } }
}
