import Foundation

/// One file's download: its lifecycle (``Download/StateMachine``) and its driver (`Download.run`).
enum Download {}

extension Download {
    /// How one attempt ended, as the driver saw it.
    enum AttemptOutcome: Sendable {
        /// The file is complete and in place.
        case completed(CompletedFile)
        /// The attempt failed.
        case failed(HaulError)
        /// The destination exists and the conflict policy said to skip.
        case skipped(existing: URL)
        /// The attempt was stopped because the state machine asked it to (pause, cancel).
        case stopped
    }

    /// The lifecycle of one download: synchronous, and free of I/O, clocks and locks.
    ///
    /// A pause or a cancel while a request runs only asks the request to stop (``Action/stopAttempt``); the machine
    /// settles when the driver reports how the attempt ended, so a late result is never lost: a file that completed
    /// while its pause was on the way is reported completed.
    struct StateMachine: Sendable, Equatable {
        /// What the caller asked of a running attempt.
        enum Intent: Sendable, Equatable {
            case pause
            case cancel
            /// Paused, then resumed before the attempt stopped: queue it again once it has.
            case requeue
        }

        enum State: Sendable, Equatable {
            case waiting
            case running(intent: Intent?)
            /// An attempt failed transiently; the next starts after a delay.
            case backingOff
            case paused
            case finished(TransferState)
        }

        enum Action: Sendable, Equatable {
            case none
            /// Take the transfer out of the scheduler's queue and report it paused.
            case dequeueAndReportPaused
            /// Queue the transfer in the scheduler and report it resumed.
            case enqueueAndReportResumed
            /// Ask the running attempt to stop; its end is reported to ``attemptEnded(_:)``.
            case stopAttempt
            /// The attempt stopped for a pause: report it paused.
            case reportPaused
            /// The attempt stopped and the transfer was resumed meanwhile: queue it again.
            case enqueue
            /// The transfer has ended: report the result; remove the partial file when asked.
            case finish(Outcome, removePartialFile: Bool, dequeue: Bool)
            /// Wait, then report ``retryDue()``; report the transfer as retrying.
            case scheduleRetry(after: Duration)
            /// Stop waiting for a retry (paused or cancelled during the wait) and report the transfer paused.
            case stopRetryWaitAndReportPaused
            /// Stop waiting for a retry, and end as the action says.
            case stopRetryWaitAndFinish(Outcome)
        }

        /// How a transfer ended, as far as the machine knows (the driver holds the payloads).
        enum Outcome: Sendable, Equatable {
            case completed, failed, cancelled, skipped
        }

        private(set) var state: State = .waiting

        init() {}

        /// A machine for a transfer that ended before this process (the store knows it completed).
        init(finished: TransferState) {
            precondition(finished.isFinished, "\(finished) is not a finished state")
            self.state = .finished(finished)
        }
        /// Attempts started since the transfer was queued or last resumed by the caller.
        private(set) var attempts = 0

        /// The scheduler chose this transfer to run.
        mutating func started() {
            guard case .waiting = self.state else {
                preconditionFailure("Started a transfer that was not waiting: \(self.state)")
            }
            self.attempts += 1
            self.state = .running(intent: nil)
        }

        /// The delay before a retry has passed.
        mutating func retryDue() -> Action {
            guard case .backingOff = self.state else { return .none }  // Paused or cancelled meanwhile.
            self.state = .waiting
            return .enqueue
        }

        /// The caller asked to pause.
        mutating func pause() -> Action {
            switch self.state {
            case .waiting:
                self.state = .paused
                return .dequeueAndReportPaused
            case .running(intent: nil):
                self.state = .running(intent: .pause)
                return .stopAttempt
            case .running(intent: .requeue):
                self.state = .running(intent: .pause)  // The stop was already asked for.
                return .none
            case .backingOff:
                self.state = .paused
                return .stopRetryWaitAndReportPaused
            case .running(intent: .pause), .running(intent: .cancel), .paused, .finished:
                return .none
            }
        }

        /// The caller asked to resume.
        mutating func resume() -> Action {
            switch self.state {
            case .paused:
                self.state = .waiting
                self.attempts = 0
                return .enqueueAndReportResumed
            case .running(intent: .pause):
                self.state = .running(intent: .requeue)
                return .none
            case .waiting, .running, .backingOff, .finished:
                return .none
            }
        }

        /// The caller asked to cancel.
        mutating func cancel() -> Action {
            switch self.state {
            case .waiting:
                self.state = .finished(.cancelled)
                return .finish(.cancelled, removePartialFile: true, dequeue: true)
            case .paused:
                self.state = .finished(.cancelled)
                return .finish(.cancelled, removePartialFile: true, dequeue: false)
            case .running(intent: .cancel):
                return .none
            case .running:
                self.state = .running(intent: .cancel)
                return .stopAttempt
            case .backingOff:
                self.state = .finished(.cancelled)
                return .stopRetryWaitAndFinish(.cancelled)
            case .finished:
                return .none
            }
        }

        /// The running attempt ended; `retryDelay` is the retry policy's answer for a failure (`nil`: no retry).
        mutating func attemptEnded(_ outcome: Outcome?, retryDelay: Duration? = nil) -> Action {
            guard case .running(let intent) = self.state else {
                preconditionFailure("An attempt ended while none was running: \(self.state)")
            }
            switch (outcome, intent) {
            case (.completed, _):
                self.state = .finished(.completed)
                return .finish(.completed, removePartialFile: false, dequeue: false)
            case (.skipped, _):
                self.state = .finished(.skipped)
                return .finish(.skipped, removePartialFile: true, dequeue: false)
            case (.failed, nil):
                if let retryDelay {
                    self.state = .backingOff
                    return .scheduleRetry(after: retryDelay)
                }
                self.state = .finished(.failed)
                return .finish(.failed, removePartialFile: false, dequeue: false)
            case (_, .pause):
                self.state = .paused
                return .reportPaused
            case (_, .requeue):
                self.state = .waiting
                return .enqueue
            case (_, .cancel), (nil, nil), (.cancelled, nil):
                // Stopped with no intent: the manager is shutting down, which cancels.
                self.state = .finished(.cancelled)
                return .finish(.cancelled, removePartialFile: true, dequeue: false)
            }
        }
    }
}
