import Dispatch
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Whether a manager's writer is the only one on its store file, and how another writer asks to share it.
///
/// A writer alone on a store may start a new transfer before the transfer's row is written: no one else can take the
/// same transfer, so the lease the row carries is needed only once someone else may look. The row of a small file is
/// then written once, completed, before the file's rename (``StoreWriter``), instead of once as waiting before its
/// request and again when it completes: on 2,000 small files, about 40 % of the store's work.
///
/// Two lock files beside the database (`flock`, which the kernel releases when a process ends, killed or not) say who
/// writes: `PATH-writers`, held exclusively by a writer alone and shared by writers that share; `PATH-join`, held
/// shared by a writer waiting to share. A writer starts alone when it gets the first exclusively; otherwise it holds
/// the second and waits for a shared hold of the first. A writer alone looks at the second at each of its periodic
/// flushes: when someone waits there, it writes every row it held back (with their leases) and then shares, so that
/// the one waiting finds every transfer leased as before. Once shared, a writer stays so until it ends.
///
/// Each writer opens the files itself: `flock` locks belong to an open file, so two managers of one process on one
/// store are two writers here, as two processes are.
final class StoreSharing: Sendable {
    /// Where the writer stands.
    enum Standing: Equatable, Sendable {
        /// The only writer on the store: it may hold rows back.
        case alone
        /// Waiting for the writer alone to share; nothing may be written yet.
        case waiting
        /// One of several writers, every row leased before its transfer starts.
        case sharing
    }

    /// How often a writer waiting to share looks again.
    static let joinPollInterval = DispatchTimeInterval.milliseconds(2)

    private struct State {
        var standing: Standing
        /// Called once the writer may write (it waited to share).
        var whenJoined: [@Sendable () -> Void] = []
        var writers: Int32
        var join: Int32
    }

    private let state: NIOLockedValueBox<State>

    /// A writer on the store file at `path`. With `wantsAlone`, it is alone when no other writer is there; otherwise
    /// it always shares (a writer that never holds rows back). A store in memory (`nil`) has no lock files: its
    /// writers share it, since nothing would tell two of them apart.
    init(databasePath path: String?, wantsAlone: Bool) {
        guard let path else {
            self.state = NIOLockedValueBox(State(standing: .sharing, writers: -1, join: -1))
            return
        }
        let writers = open(path + "-writers", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        let join = open(path + "-join", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard writers >= 0, join >= 0 else {
            // Without its lock files a writer cannot know whether it is alone: it shares (leases every row first),
            // which is always safe.
            if writers >= 0 { Self.closeFile(writers) }
            if join >= 0 { Self.closeFile(join) }
            self.state = NIOLockedValueBox(State(standing: .sharing, writers: -1, join: -1))
            return
        }
        let alone = wantsAlone && Self.lock(writers, LOCK_EX | LOCK_NB)
        self.state = NIOLockedValueBox(State(standing: alone ? .alone : .waiting, writers: writers, join: join))
        if !alone { self.askToShare() }
    }

    deinit {
        self.close()
    }

    var standing: Standing { self.state.withLockedValue { $0.standing } }

    /// Whether the writer may write now; when it may not (it waits to share), `then` is called once it may, from
    /// another thread.
    func mayWrite(orThen then: @escaping @Sendable () -> Void) -> Bool {
        self.state.withLockedValue { state in
            guard state.standing == .waiting else { return true }
            state.whenJoined.append(then)
            return false
        }
    }

    /// Blocks until the writer may write (at once unless it waits to share): for a short task that writes outside a
    /// manager (forgetting finished batches).
    func waitUntilWriting() {
        let done = DispatchSemaphore(value: 0)
        if !self.mayWrite(orThen: { done.signal() }) { done.wait() }
    }

    /// For a writer alone: whether another writer waits to share the store. A shared lock held on the join file
    /// makes the exclusive one fail.
    func someoneWaits() -> Bool {
        let join = self.state.withLockedValue { $0.standing == .alone ? $0.join : -1 }
        guard join >= 0 else { return false }
        guard Self.lock(join, LOCK_EX | LOCK_NB) else { return true }
        _ = flock(join, LOCK_UN)
        return false
    }

    /// For a writer alone whose held rows are written: it shares from now on. Its exclusive lock goes; it then waits
    /// as any writer asking to share (at once, unless a third writer took the store alone meanwhile).
    func share() {
        let writers = self.state.withLockedValue { state -> Int32 in
            guard state.standing == .alone else { return -1 }
            state.standing = .waiting
            return state.writers
        }
        guard writers >= 0 else { return }
        _ = flock(writers, LOCK_UN)
        self.askToShare()
    }

    /// Releases the lock files: the writer has ended.
    func close() {
        let (writers, join) = self.state.withLockedValue { state -> (Int32, Int32) in
            defer {
                state.writers = -1
                state.join = -1
            }
            return (state.writers, state.join)
        }
        if writers >= 0 { Self.closeFile(writers) }
        if join >= 0 { Self.closeFile(join) }
    }

    /// Holds the join file shared (a writer alone sees it at its next flush) and looks for a shared hold of the
    /// writers' file every ``joinPollInterval`` until it gets one.
    private func askToShare() {
        let join = self.state.withLockedValue { $0.join }
        // Blocking: only a writer alone looking (for a moment) holds it exclusively.
        while flock(join, LOCK_SH) != 0 && errno == EINTR {}
        self.poll()
    }

    private func poll() {
        let (writers, join) = self.state.withLockedValue { ($0.writers, $0.join) }
        guard writers >= 0 else { return }
        if Self.lock(writers, LOCK_SH | LOCK_NB) {
            _ = flock(join, LOCK_UN)
            let waiting = self.state.withLockedValue { state in
                state.standing = .sharing
                defer { state.whenJoined = [] }
                return state.whenJoined
            }
            for then in waiting { then() }
            return
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.joinPollInterval) { self.poll() }
    }

    private static func closeFile(_ descriptor: Int32) {
        #if canImport(Glibc)
        _ = Glibc.close(descriptor)
        #else
        _ = Darwin.close(descriptor)
        #endif
    }

    /// `flock`, tried again when a signal interrupted it: whether the lock was taken.
    private static func lock(_ descriptor: Int32, _ operation: Int32) -> Bool {
        while true {
            if flock(descriptor, operation) == 0 { return true }
            if errno != EINTR { return false }
        }
    }
}
