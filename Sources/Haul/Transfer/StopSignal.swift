import NIOConcurrencyHelpers

/// A one-shot signal that asks a running attempt to stop.
///
/// The attempt's driver registers the attempt's task with it (``onFire(_:)``): when it fires, that task is
/// cancelled. A retry's wait waits on it (``wait(upTo:)``).
final class StopSignal: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Void, Never>)
        case cancelling(@Sendable () -> Void)
        case fired
    }
    private let state = NIOLockedValueBox(State.idle)

    /// Fires the signal; later calls do nothing.
    func fire() {
        let (continuation, cancel) = self.state.withLockedValue {
            state -> (CheckedContinuation<Void, Never>?, (@Sendable () -> Void)?) in
            defer { state = .fired }
            switch state {
            case .waiting(let continuation): return (continuation, nil)
            case .cancelling(let cancel): return (nil, cancel)
            case .idle, .fired: return (nil, nil)
            }
        }
        continuation?.resume()
        cancel?()
    }

    /// Runs `cancel` when the signal fires, or at once if it has fired already. For one attempt's task: a signal
    /// takes one registration, and is not waited on as well.
    func onFire(_ cancel: @escaping @Sendable () -> Void) {
        let firedAlready = self.state.withLockedValue { state -> Bool in
            switch state {
            case .idle:
                state = .cancelling(cancel)
                return false
            case .fired:
                return true
            case .waiting, .cancelling:
                preconditionFailure("A stop signal takes one waiter or one registration")
            }
        }
        if firedAlready { cancel() }
    }

    /// Returns when the signal fires or the calling task is cancelled (which does not fire it: the signal can be
    /// waited for again).
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = self.state.withLockedValue { state in
                    if case .idle = state, !Task.isCancelled {
                        state = .waiting(continuation)
                        return false
                    }
                    return true
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let continuation: CheckedContinuation<Void, Never>? = self.state.withLockedValue { state in
                guard case .waiting(let continuation) = state else { return nil }
                state = .idle
                return continuation
            }
            continuation?.resume()
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
