import NIOConcurrencyHelpers

/// A one-shot signal that asks a running attempt (or a wait before a retry) to stop.
///
/// The attempt runs through ``run(_:)``, in a task the signal cancels when it fires; a wait uses ``wait(upTo:)``.
final class StopSignal: Sendable {
    private struct State {
        var isFired = false
        /// The task waiting in ``wait()``.
        var waiter: CheckedContinuation<Void, Never>?
        /// Cancels the operation running in ``run(_:)``.
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

    /// Runs `operation` in a task of its own, cancelled when the signal fires (at once if it has fired already) or
    /// when the calling task is cancelled, and returns its result.
    ///
    /// One task per attempt: waiting for the signal in a second child task beside the operation cost a task, a
    /// group and a cancellation per file (about 3 % of the CPU on 2,000 small files).
    func run<T: Sendable>(_ operation: @escaping @Sendable () async -> T) async -> T {
        let task = Task { await operation() }
        let firedAlready = self.state.withLockedValue { state in
            if !state.isFired { state.cancelsOperation = { task.cancel() } }
            return state.isFired
        }
        if firedAlready { task.cancel() }
        let result = await withTaskCancellationHandler {
            await task.value
        } onCancel: {
            task.cancel()
        }
        self.state.withLockedValue { $0.cancelsOperation = nil }
        return result
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
