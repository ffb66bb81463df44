/// One of the client's connections (``HTTP1ConnectionHandler``): one exchange at a time, kept alive between
/// them when the server allows it.
enum HTTP1Connection {
    /// The lifecycle of a connection and of the exchange it carries: synchronous, and free of I/O, clocks and locks.
    struct StateMachine: Sendable, Equatable {
        enum State: Sendable, Equatable {
            /// Between exchanges (in the pool, or new): `served` exchanges have ended on it.
            case idle(served: Int)
            /// A request sent, its response's head not yet received.
            case awaitingHead(served: Int)
            /// The head received; the body arrives until its end. `keepAlive`: the response lets the connection
            /// carry another exchange.
            case receivingBody(served: Int, keepAlive: Bool)
            /// Closed, or closing: no exchange starts or continues on it.
            case closed
        }

        /// Why an exchange failed.
        enum Failure: Sendable, Equatable {
            /// The connection closed before any of the response arrived, after it had carried other exchanges: the
            /// server dropped a kept-alive connection as the request went out, and the request may be sent again on a
            /// new one (it was a GET: nothing happened on the server).
            case closedBeforeResponseOnReusedConnection
            /// The connection closed before the response's end.
            case closedBeforeEnd
            /// Nothing arrived for the read timeout.
            case timedOut
            /// An error of the connection or of the response's parsing, or the caller's (a cancel).
            case error
        }

        enum Action: Sendable, Equatable {
            case none
            /// Send the request.
            case sendRequest
            /// Refuse the request: the connection is closed, and the pool sends it on another (nothing was sent).
            case refuseRequest
            /// Hand the head, or a part of the body, to the exchange.
            case deliver
            /// The response has ended: complete the exchange, then give the connection back to the pool if `reuse`,
            /// or close it.
            case finishExchange(reuse: Bool)
            /// Fail the exchange, then close the connection.
            case failExchange(Failure)
            /// Close the connection (no exchange is under way).
            case close
        }

        private(set) var state = State.idle(served: 0)

        /// The caller asks to send a request.
        mutating func requestStarted() -> Action {
            switch self.state {
            case .idle(let served):
                self.state = .awaitingHead(served: served)
                return .sendRequest
            case .closed:
                return .refuseRequest
            case .awaitingHead, .receivingBody:
                preconditionFailure("A request was started on a connection that carries one: \(self.state)")
            }
        }

        /// The response's head arrived; `keepAlive` is what the response says of the connection.
        mutating func headReceived(keepAlive: Bool) -> Action {
            switch self.state {
            case .awaitingHead(let served):
                self.state = .receivingBody(served: served, keepAlive: keepAlive)
                return .deliver
            case .closed:
                return .none  // Late: the exchange has failed and the connection is closing.
            case .idle, .receivingBody:
                // A response nobody asked for, or a second head: the connection is not what we think it is.
                self.state = .closed
                return .close
            }
        }

        /// A part of the body arrived.
        mutating func bodyReceived() -> Action {
            switch self.state {
            case .receivingBody:
                return .deliver
            case .closed:
                return .none
            case .idle, .awaitingHead:
                self.state = .closed
                return .close
            }
        }

        /// The response ended; `isActive` says whether the connection is still open (a body read to the
        /// connection's end ends as the connection closes).
        mutating func endReceived(isActive: Bool) -> Action {
            switch self.state {
            case .receivingBody(let served, let keepAlive):
                let reuse = keepAlive && isActive
                self.state = reuse ? .idle(served: served + 1) : .closed
                return .finishExchange(reuse: reuse)
            case .closed:
                return .none
            case .idle, .awaitingHead:
                self.state = .closed
                return .close
            }
        }

        /// The connection closed.
        mutating func connectionClosed() -> Action {
            defer { self.state = .closed }
            switch self.state {
            case .awaitingHead(let served):
                return .failExchange(served > 0 ? .closedBeforeResponseOnReusedConnection : .closedBeforeEnd)
            case .receivingBody:
                return .failExchange(.closedBeforeEnd)
            case .idle, .closed:
                return .none
            }
        }

        /// Nothing arrived for the read timeout.
        mutating func readTimedOut() -> Action {
            self.fail(.timedOut)
        }

        /// What arrived could not be parsed as a response. On a reused connection before any of the response, it is
        /// what the last response left over (a server that sent more than its framing said): the request goes again
        /// on a new connection, as after a close.
        mutating func responseUnreadable() -> Action {
            if case .awaitingHead(let served) = self.state, served > 0 {
                return self.fail(.closedBeforeResponseOnReusedConnection)
            }
            return self.fail(.error)
        }

        /// An error of the connection, of the response's parsing, or the caller's.
        mutating func errorOccurred() -> Action {
            self.fail(.error)
        }

        private mutating func fail(_ failure: Failure) -> Action {
            defer { self.state = .closed }
            switch self.state {
            case .awaitingHead, .receivingBody:
                return .failExchange(failure)
            case .idle:
                return .close
            case .closed:
                return .none
            }
        }
    }
}
