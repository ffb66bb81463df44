import NIOConcurrencyHelpers

extension TransferManager {
    /// The manager's lock and what it protects: the ``Core``, and the store writer its decisions are recorded to.
    ///
    /// Each transition runs under the lock; before the lock is released, the store operations the core decided are
    /// appended to the writer's queue (an in-memory append), so that the queue keeps the order of the decisions
    /// across threads: a checkpoint never reaches the store before its transfer's insert.
    final class LockedCore: Sendable {
        private let box: NIOLockedValueBox<Core>
        private let store: StoreWriter?

        init(_ core: Core, store: StoreWriter?) {
            self.box = NIOLockedValueBox(core)
            self.store = store
        }

        /// Runs `body` with the core, the lock held and the time set, then queues what it decided to record.
        func withLockedValue<T>(_ body: (inout Core) throws -> T) rethrows -> T {
            let now = ContinuousClock.now
            return try self.box.withLockedValue { core in
                core.now = now
                defer {
                    if !core.storeOperations.isEmpty {
                        let operations = core.storeOperations
                        core.storeOperations.removeAll(keepingCapacity: true)
                        self.store?.enqueue(contentsOf: operations)
                    }
                }
                return try body(&core)
            }
        }
    }
}
