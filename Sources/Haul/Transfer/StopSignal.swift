import NIOConcurrencyHelpers

/// A one-shot signal that asks a running attempt (or a wait before a retry) to stop.
///
/// The attempt runs in a task the signal cancels when it fires (``cancelOnFire(_:)``); a wait uses ``wait(upTo:)``.
final class StopSignal: Sendable {
    private struct State {
        var isFired = false
        /// The task waiting in ``wait()``.
        var waiter: CheckedContinuation<Void, Never>?
        /// Cancels the task given to ``cancelOnFire(_:)``.
        var cancelsOperation: (@Sendable () -> Void)?
    }
    private let state = NIOLockedValueBox(State())

    /// Fires the signal; later calls do nothing.
    func fire() {
        let (waiter, cancelsOperation) = self.state.withLockedValue { state in
            defer { (state.isFired, state.waiter, state.cancelsOperation) = (true, nil, nil) }
            return state.isFired ? (nil, nil) : (state.waiter, state.cancelsOperation)
        }
        waiter?.resume()
        cancelsOperation?()
    }

    /// Whether the signal has fired.
    var isFired: Bool { self.state.withLockedValue { $0.isFired } }

    /// Cancels `task` when the signal fires, or at once if it has fired already: the task running the attempt.
    func cancelOnFire(_ task: Task<Void, Never>) {
        let firedAlready = self.state.withLockedValue { state in
            if !state.isFired { state.cancelsOperation = { task.cancel() } }
            return state.isFired
        }
        if firedAlready { task.cancel() }
    }

    /// The task given to ``cancelOnFire(_:)`` has ended: there is nothing left to cancel. A task's handle keeps the
    /// whole stack the task grew (its async frames: about 30 KB for a download) after the task ends, and a signal
    /// may outlive its task (a publication waiting for its commit holds it).
    func taskEnded() {
        self.state.withLockedValue { $0.cancelsOperation = nil }
    }

    /// Returns when the signal fires or the calling task is cancelled (which does not fire it: the signal can be
    /// waited for again).
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = self.state.withLockedValue { state in
                    if !state.isFired, state.waiter == nil, !Task.isCancelled {
                        state.waiter = continuation
                        return false
                    }
                    return true
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = self.state.withLockedValue { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }

    /// Returns when the signal fires or `delay` has passed, whichever comes first.
    func wait(upTo delay: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: delay) }
            group.addTask { await self.wait() }
            await group.next()
            group.cancelAll()
        }
    }
}
