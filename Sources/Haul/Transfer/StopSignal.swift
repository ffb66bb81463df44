import NIOConcurrencyHelpers

/// A one-shot signal that asks a running attempt to stop.
///
/// The attempt's driver waits on it beside the request; when it fires, the driver cancels the request's task.
final class StopSignal: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Void, Never>)
        case fired
    }
    private let state = NIOLockedValueBox(State.idle)

    /// Fires the signal; later calls do nothing.
    func fire() {
        let continuation: CheckedContinuation<Void, Never>? = self.state.withLockedValue { state in
            defer { state = .fired }
            if case .waiting(let continuation) = state { return continuation }
            return nil
        }
        continuation?.resume()
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
