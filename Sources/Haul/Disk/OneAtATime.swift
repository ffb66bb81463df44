import NIOConcurrencyHelpers
import NIOCore

/// Runs pieces of work one at a time, in the order they come, without making anyone wait: a piece that comes while
/// another runs is queued, and the thread running goes on with it when it is done. For work that two threads doing
/// at once would each wait for on a lock of the kernel's: renames into one folder, which on ext4 contend for the
/// folder's lock.
final class OneAtATime: Sendable {
    private struct State {
        /// The pieces waiting for the one running; never any when none runs.
        var queued: [@Sendable () -> Void] = []
        var isRunning = false
    }

    private let state = NIOLockedValueBox(State())

    /// Runs `work` now, on this thread, unless a piece is running: then it runs after the pieces queued before it,
    /// on the thread running them, and this returns at once.
    func run(_ work: @escaping @Sendable () -> Void) {
        let runsNow = self.state.withLockedValue { state in
            guard state.isRunning else {
                state.isRunning = true
                return true
            }
            state.queued.append(work)
            return false
        }
        guard runsNow else { return }
        work()
        self.runQueued()
    }

    /// Queues `pieces`, in order, and when no piece is running starts running them on `loop` (in one task); returns
    /// at once.
    func run(_ pieces: [@Sendable () -> Void], on loop: any EventLoop) {
        guard !pieces.isEmpty else { return }
        let starts = self.state.withLockedValue { state in
            state.queued.append(contentsOf: pieces)
            let wasRunning = state.isRunning
            state.isRunning = true
            return !wasRunning
        }
        if starts { loop.execute { self.runQueued() } }
    }

    /// Runs the queued pieces, and those queued meanwhile, until none is left.
    private func runQueued() {
        while true {
            let pieces = self.state.withLockedValue { state in
                var taken: [@Sendable () -> Void] = []
                swap(&taken, &state.queued)
                if taken.isEmpty { state.isRunning = false }
                return taken
            }
            if pieces.isEmpty { return }
            for piece in pieces { piece() }
        }
    }
}
