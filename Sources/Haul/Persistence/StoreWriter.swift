import Foundation
import NIOConcurrencyHelpers

/// Writes the manager's changes to the store behind it: operations queue in memory (cheap, under the manager's
/// lock) and reach the database in one transaction every ``flushInterval``, so no database I/O ever happens under
/// the lock or per chunk. A change is on disk at most one interval after it happened; the partial files themselves
/// are the truth for how many bytes are there.
package final class StoreWriter: Sendable {
    /// How often queued changes are written. 100 ms: a killed process loses at most that much bookkeeping, and
    /// nothing of the files.
    static let flushInterval: Duration = .milliseconds(100)

    let store: TransferStore
    /// This manager's name in leases: unique per manager, so two processes (or two managers) never share one.
    let owner = LeaseOwner.current()
    private let pending = NIOLockedValueBox<[StoreOperation]>([])
    private let lastErrorBox = NIOLockedValueBox<(any Error)?>(nil)

    package init(store: TransferStore) { self.store = store }

    /// Queues an operation.
    package func enqueue(_ operation: StoreOperation) {
        self.pending.withLockedValue { $0.append(operation) }
    }

    /// Writes what is queued now, and then `last`, in one transaction.
    package func flush(adding last: StoreOperation? = nil) {
        var operations = self.pending.withLockedValue { pending in
            defer { pending = [] }
            return pending
        }
        if let last { operations.append(last) }
        do {
            try self.store.apply(owner: self.owner, operations)
        } catch {
            self.lastErrorBox.withLockedValue { $0 = error }
        }
    }

    /// Claims a transfer before its request, writing what is queued first (the transfer's row among it).
    func claim(_ id: TransferID) -> TransferStore.Claim {
        let operations = self.pending.withLockedValue { pending in
            defer { pending = [] }
            return pending
        }
        do {
            return try self.store.claim(id, owner: self.owner, pending: operations)
        } catch {
            // The store is unusable: record why, and download rather than fail (the files are the priority).
            self.lastErrorBox.withLockedValue { $0 = error }
            return .claimed
        }
    }

    /// The last error writing to the store, if any.
    var lastError: (any Error)? { self.lastErrorBox.withLockedValue { $0 } }
}
