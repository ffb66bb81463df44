import Foundation

extension TransferManager {
    /// One batch as the manager knows it.
    struct BatchRecord: Sendable {
        /// The report's line of each item, in the order they were added: its transfer and URL (as text, see
        /// ``FinishedRecord/urlText``) from the start, its result once ``settled`` says so. The report takes this
        /// array as it is when the batch ends, without a copy (a copy of 100,000 lines was the peak of the memory a
        /// long list takes); the batch then lets go of it.
        var items: [BatchReport.Item] = []
        /// Whether each item has its result in ``items``.
        var settled: [Bool] = []
        var finishedCount = 0
        /// The positions in ``items`` that wait for each transfer's result.
        var pending: [TransferID: [Int]] = [:]
        var tracker = BatchProgressTracker()
        var lastProgressEvent: ContinuousClock.Instant?
        var events: EventOutlet<BatchEvent>?
        var eventStream: AsyncStream<BatchEvent>?
        /// Which events ``events`` carries.
        var eventSelection = BatchEvent.Selection.all
        var waiters: [CheckedContinuation<BatchReport, Never>] = []
        /// Producers waiting until at most `limit` of the batch's items are unfinished.
        var roomWaiters: [(limit: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var report: BatchReport?
        /// Whether transfers may still be added before the batch can finish.
        var isSealed = true
        /// Whether ``Core/stopAll(aftermath:)`` ended it: nothing more is added, and the running transfers it left to
        /// end are settled as cancelled when they end paused.
        var isStopped = false

        var isFinished: Bool { self.report != nil }

        /// How many items have no result yet.
        var unfinishedCount: Int { self.settled.count - self.finishedCount }

        /// Takes out the producers whose limit the batch is now within, for the driver to let go after the lock.
        mutating func takeRoomWaitersWithinLimit() -> [CheckedContinuation<Void, Never>] {
            guard !self.roomWaiters.isEmpty else { return [] }
            let unfinished = self.unfinishedCount
            var released: [CheckedContinuation<Void, Never>] = []
            self.roomWaiters.removeAll { waiter in
                guard unfinished <= waiter.limit else { return false }
                released.append(waiter.continuation)
                return true
            }
            return released
        }
    }
}
