import NIOConcurrencyHelpers

/// A result handed once from an event loop to the one task that waits for it: a response's head, and the end of a
/// response on one of Haul's own connections. A lock and a continuation, without a promise's future and callbacks.
///
/// The first result given is the one delivered; later ones are dropped (an error after the head is the end's
/// business, as a completed promise ignored it).
public struct Handoff<Value: Sendable>: Sendable {
    private enum State {
        /// Nothing given, nobody waiting.
        case empty
        /// The task waits.
        case awaited(UnsafeContinuation<Value, any Error>)
        /// Given before the task came for it.
        case given(Result<Value, any Error>)
        /// Delivered to the task.
        case delivered
    }

    private let state = NIOLockedValueBox(State.empty)

    /// A handoff with nothing given yet.
    public init() {}

    /// Gives the result, unless one was given already. On any thread; a waiting task resumes on its own executor.
    public func complete(_ result: Result<Value, any Error>) {
        let waiting = self.state.withLockedValue { state -> UnsafeContinuation<Value, any Error>? in
            switch state {
            case .empty:
                state = .given(result)
                return nil
            case .awaited(let continuation):
                state = .delivered
                return continuation
            case .given, .delivered:
                return nil
            }
        }
        waiting?.resume(with: result)
    }

    public func succeed(_ value: Value) { self.complete(.success(value)) }

    public func fail(_ error: any Error) { self.complete(.failure(error)) }

    /// The result: at once when it was given already, otherwise when it is. One task waits, once.
    public nonisolated(nonsending) func value() async throws -> Value {
        try await withUnsafeThrowingContinuation { continuation in
            let given = self.state.withLockedValue { state -> Result<Value, any Error>? in
                switch state {
                case .empty:
                    state = .awaited(continuation)
                    return nil
                case .given(let result):
                    state = .delivered
                    return result
                case .awaited, .delivered:
                    preconditionFailure("a handoff's result was waited for twice")
                }
            }
            if let given { continuation.resume(with: given) }
        }
    }
}
