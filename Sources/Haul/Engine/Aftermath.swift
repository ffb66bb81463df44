import Foundation

extension TransferManager {
    /// A transfer waiting to be retried: the driver waits for `delay` or until `signal` fires.
    struct RetryWait: Sendable {
        var delay: Duration
        var signal: StopSignal
        /// The host held for the wait, because the server sent `Retry-After`.
        var heldHost: String?
    }

    /// What must happen after the lock is released: it calls out to code that may take the lock again.
    struct Aftermath: Sendable {
        var finishedStreams: [AsyncStream<BatchEvent>.Continuation] = []
        var removedFiles: [String] = []
        /// Stop signals to fire once the lock is released: firing one cancels its attempt's task (or ends a wait
        /// before a retry); none of that needs the lock.
        var stopSignals: [StopSignal] = []
        /// Transfers the scheduler started, each to run in a task of its own once the lock is released.
        var starts: [(id: TransferID, signal: StopSignal)] = []
        /// The manager's ``TransferManager/waitForTransfersToEnd()``, resumed once the manager has shut down and its
        /// last transfer task has ended.
        var endedWaiter: CheckedContinuation<Void, Never>?
        /// Producers waiting for room in a batch that has it now (``Batch/waitUntilUnfinished(atMost:)``).
        var roomWaiters: [CheckedContinuation<Void, Never>] = []
        /// Callers waiting for a batch's report, with the report.
        var reports: [(waiter: CheckedContinuation<BatchReport, Never>, report: BatchReport)] = []

        func perform() {
            self.endedWaiter?.resume()
            for waiter in self.roomWaiters { waiter.resume() }
            for (waiter, report) in self.reports { waiter.resume(returning: report) }
            for signal in self.stopSignals { signal.fire() }
            for stream in self.finishedStreams { stream.finish() }
            for file in self.removedFiles { PartialFile.remove(file) }
        }
    }
}
