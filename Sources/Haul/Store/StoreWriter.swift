import Dispatch
import Foundation
import GRDB
import NIOConcurrencyHelpers
import NIOCore

/// Writes the manager's changes to the store behind it: operations queue in memory (cheap, under the manager's
/// lock) and reach the database in one transaction every ``flushInterval``, so no database I/O ever happens under
/// the lock or per chunk. A change is on disk at most one interval after it happened; the partial files themselves
/// are the truth for how many bytes are there.
package final class StoreWriter: Sendable {
    /// How often queued changes are written. 100 ms: a killed process loses at most that much bookkeeping, and
    /// nothing of the files.
    static let flushInterval: Duration = .milliseconds(100)
    /// How long a publishing record waits for others to share its transaction. A transfer leaves the network before
    /// it publishes (its slots already serve the next files), so the wait delays only its own rename; small files
    /// finishing together then share one commit instead of taking one each (on 2,000 small files, 8 % less CPU).
    static let publishingLinger: Duration = .milliseconds(5)

    /// This writer's wait for publishing records (``publishingLinger`` unless a test or benchmark chose another).
    let linger: Duration

    let store: TransferStore
    /// This manager's name in leases: unique per manager, so two processes (or two managers) never share one.
    let owner = LeaseOwner.current()
    private let state = NIOLockedValueBox(State())
    private let lastErrorBox = NIOLockedValueBox<(any Error)?>(nil)
    /// Runs the completions that want a loop (see ``complete(_:)``).
    private let loopCompletions = OneAtATime()

    /// Something to do in a write transaction, after the operations queued before it.
    private struct Job: Sendable {
        var operations: [StoreOperation]
        /// Whether the job may wait for ``linger`` when it finds a transaction running: a publishing record may; a
        /// claim, a flush waited for, or the periodic flush may not.
        var mayLinger: Bool
        /// Work of its own after the operations (a claim's statement); `nil` for a job that only writes them.
        var body: (@Sendable (Database) throws -> Void)?
        var completion: @Sendable () -> Void
        /// Whether `completion` runs on an event loop (this one, or another: see ``complete(_:)``), or, when `nil`, on
        /// the database's writer queue.
        var loop: (any EventLoop)? = nil
        /// Written after `operations`: kept beside them, not appended to them, as a publishing record, one a file,
        /// usually finds none queued, and appending it made an array for it (and one more, passed as an array of one).
        var last: StoreOperation? = nil

        /// A job that does nothing, to swap a job into a place with.
        static let placeholder = Job(operations: [], mayLinger: false, body: nil, completion: {})
    }

    private struct State: Sendable {
        /// Operations queued since the last job took them.
        var pending: [StoreOperation] = []
        /// Jobs waiting for the running transaction to end, or for a wait to end.
        var jobs: [Job] = []
        /// What the writer is doing.
        var phase = Phase.idle
        /// How many waits have begun: a wait cut short must not start a transaction when its time comes.
        var lingerCount = 0
        /// How many transactions this writer has run (for tests and benchmarks).
        var transactionCount = 0
        /// Transfers whose lease this manager took when their row was inserted, and until when it may rely on it
        /// (a margin before the lease expires); removed when something gives the lease up.
        var leasedAtInsert: [TransferID: Double] = [:]
    }

    /// What the writer is doing.
    private enum Phase: Equatable {
        /// Nothing queued as a job.
        case idle
        /// Waiting for ``linger`` (the number tells the waits apart) before a transaction, so that others share it.
        case lingering(Int)
        /// A transaction is running (and the jobs queued meanwhile follow in the next one).
        case writing
    }

    /// What a submitted job starts.
    private enum Start {
        /// Nothing: the job goes in a transaction already running or waited for.
        case none
        /// A transaction, now.
        case now
        /// A wait (its number), then a transaction; timed by `loop` when a job waiting has one.
        case afterLinger(Duration, number: Int, on: (any EventLoop)?)
    }

    /// When a job's transaction starts.
    enum Timing: Sendable {
        /// At once, unless one is running (the job goes in the next one); a wait under way is cut short.
        case promptly
        /// After `linger`, unless one is waited for already (the job shares it); when one is running, `linger` after
        /// it ends (unless a job that may not wait came meanwhile).
        case afterLinger(Duration)
        /// At once when nothing is running or waited for; otherwise the job shares that transaction.
        case withOthers

        /// Whether a job with this timing may wait for others (``Job/mayLinger``).
        var mayLinger: Bool {
            if case .afterLinger(let linger) = self { linger > .zero } else { false }
        }
    }

    package init(store: TransferStore, publishingLinger: Duration = StoreWriter.publishingLinger) {
        self.store = store
        self.linger = publishingLinger
        LeaseOwner.register(self.owner)
    }

    deinit {
        LeaseOwner.unregister(self.owner)
    }

    /// The manager has ended: its leases (those on completions recorded before their renames, which stay) are free
    /// at once for the other managers of this process, as a killed process's are for other processes.
    package func retire() {
        LeaseOwner.unregister(self.owner)
    }

    /// How many transactions this writer has run.
    package var transactionCount: Int { self.state.withLockedValue { $0.transactionCount } }

    /// How many jobs wait for a transaction (for tests).
    package var queuedJobCount: Int { self.state.withLockedValue { $0.jobs.count } }

    /// Whether jobs wait for ``linger`` to end before their transaction starts (for tests).
    package var isLingering: Bool {
        self.state.withLockedValue { if case .lingering = $0.phase { true } else { false } }
    }

    /// Queues an operation.
    package func enqueue(_ operation: StoreOperation) {
        self.state.withLockedValue { state in
            state.pending.append(operation)
            if let id = operation.releasedLease { state.leasedAtInsert[id] = nil }
        }
    }

    /// Queues operations, in order.
    package func enqueue(contentsOf operations: [StoreOperation]) {
        self.state.withLockedValue { state in
            state.pending.append(contentsOf: operations)
            for operation in operations {
                if let id = operation.releasedLease { state.leasedAtInsert[id] = nil }
            }
        }
    }

    /// Writes what is queued now, and then `last`, in one transaction, and waits until it is written. Blocks its
    /// thread: for the end of a manager's scope and for benchmarks, not for transfers.
    package func flush(adding last: StoreOperation? = nil) {
        let done = DispatchSemaphore(value: 0)
        self.submit(adding: last, timing: .promptly) { done.signal() }
        done.wait()
    }

    /// Starts writing what is queued now, in one transaction, and returns at once (the periodic flush): it joins a
    /// transaction already waited for rather than cutting the wait short.
    func flushInBackground() {
        self.submit(adding: nil, timing: .withOthers) {}
    }

    /// Starts writing what is queued now and returns at once, cutting short a wait for publishing records under way:
    /// nothing else is coming to share it (every transfer has been stopped).
    func flushPromptly() {
        self.submit(adding: nil, timing: .promptly) {}
    }

    /// Writes what is queued now and then `last`, in one transaction, and calls `written` once it is written (on an
    /// event loop when `loop` is given, or without one on the database's writer queue, where `written` must be quick);
    /// nothing waits or blocks meanwhile. When `lingering` and no transaction is under way, the transaction starts
    /// after ``linger``, so that the records of files that finish together share it (the publishing records, one per
    /// file). Without `lingering` (the last files of a batch, with no one to wait for) it starts at once, cutting short
    /// a wait under way: the records waiting there go with it.
    ///
    /// The transaction's callbacks that want a loop run in one task on one loop (`loop` or another: see
    /// ``complete(_:)``), in the order of their records: one hand-off per transaction, not one per file.
    func flush(
        adding last: StoreOperation,
        lingering: Bool = true,
        on loop: (any EventLoop)? = nil,
        then written: @escaping @Sendable () -> Void
    ) {
        self.submit(adding: last, timing: lingering ? .afterLinger(self.linger) : .promptly, on: loop, then: written)
    }

    /// Claims a transfer before its request, writing what is queued up to the transfer's row first (the rest waits
    /// for the next transaction); suspends, never blocks, while the database works.
    nonisolated(nonsending) func claim(_ id: TransferID) async -> TransferStore.Claim {
        // Leased when its row was inserted, and nothing gave the lease up since: no transaction to wait for.
        let leased = self.state.withLockedValue { state in
            state.leasedAtInsert.removeValue(forKey: id).map { $0 > Date().timeIntervalSince1970 } ?? false
        }
        if leased { return .claimed }
        let owner = self.owner
        let store = self.store
        let result = await withCheckedContinuation { continuation in
            // Promptly: the transfer's request waits for it.
            self.submit(
                adding: nil,
                through: id,
                timing: .promptly,
                then: { try store.claim(id, owner: owner, in: $0) }
            ) {
                continuation.resume(returning: $0)
            }
        }
        // The store is unusable: its error is recorded; download rather than fail (the files are the priority).
        return (try? result.get()) ?? .claimed
    }

    /// Takes the queued operations and schedules them, then `last`, then `body`, as a job; nothing waits here.
    ///
    /// Jobs run in the order they were submitted (taking the operations and queueing the job happen under one lock).
    /// While a transaction runs, new jobs wait and then share the next one: a group commit, so sixteen transfers
    /// finishing at once cost one or two transactions, not sixteen. `timing` says when the job's transaction starts
    /// (see ``Timing``).
    ///
    /// With `through`, the job takes the queued operations only up to that transfer's insert (none when its insert
    /// has been taken already), and leaves the rest queued in order: a claim waits for its own row, not for the
    /// hundreds of rows a batch being added queued after it (the first request of a batch waited for them).
    private func submit<T: Sendable>(
        adding last: StoreOperation?,
        through id: TransferID? = nil,
        timing: Timing,
        then body: @escaping @Sendable (Database) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        let result = NIOLockedValueBox<Result<T, any Error>?>(nil)
        let job = Job(
            operations: [],
            mayLinger: timing.mayLinger,
            body: { db in
                do {
                    let value = try body(db)
                    result.withLockedValue { $0 = .success(value) }
                } catch {
                    result.withLockedValue { $0 = .failure(error) }
                    throw error
                }
            },
            completion: {
                completion(result.withLockedValue { $0 } ?? .failure(CancellationError()))
            },
            last: last
        )
        self.schedule(job, through: id, timing: timing)
    }

    /// Takes the queued operations and schedules them, then `last`, as a job that does nothing else, and calls
    /// `written` when its transaction has ended (committed or not; an error is kept as ``lastError``), on an event
    /// loop when `loop` is given (see ``complete(_:)``). Without the result, body and completion of
    /// ``submit(adding:through:timing:then:completion:)``: a publishing record takes this way, one a file, and each
    /// closure and box was an allocation.
    private func submit(
        adding last: StoreOperation?,
        timing: Timing,
        on loop: (any EventLoop)? = nil,
        then written: @escaping @Sendable () -> Void
    ) {
        self.schedule(
            Job(operations: [], mayLinger: timing.mayLinger, body: nil, completion: written, loop: loop, last: last),
            through: nil,
            timing: timing
        )
    }

    /// Queues `job` with the operations queued so far (up to `id`'s insert, with `id`) before its own `last`, and
    /// starts its transaction as `timing` says.
    private func schedule(_ job: consuming Job, through id: TransferID?, timing: Timing) {
        var job = job
        let start = self.state.withLockedValue { state -> Start in
            if let id {
                let end = state.pending.firstIndex { $0.insertedID == id }.map { $0 + 1 } ?? 0
                job.operations = Array(state.pending[..<end])
                state.pending.removeFirst(end)
            } else {
                // Moved, not copied: the queued operations hold whole rows.
                swap(&job.operations, &state.pending)
            }
            // Moved in, not copied: a copy counted each of its references once more here and once less after.
            state.jobs.append(Job.placeholder)
            swap(&state.jobs[state.jobs.count - 1], &job)
            switch (state.phase, timing) {
            case (.writing, _), (.lingering, .afterLinger), (.lingering, .withOthers):
                return .none
            case (.idle, .afterLinger(let linger)) where linger > .zero:
                state.lingerCount += 1
                state.phase = .lingering(state.lingerCount)
                return .afterLinger(linger, number: state.lingerCount, on: state.jobs.last?.loop)
            case (.idle, _), (.lingering, .promptly):
                state.phase = .writing
                return .now
            }
        }
        self.start(start)
    }

    /// Starts what ``submit(adding:through:timing:then:completion:)`` or the end of a transaction decided.
    private func start(_ start: Start) {
        switch start {
        case .none:
            break
        case .now:
            self.writeQueuedJobs()
        case .afterLinger(let linger, let number, let loop):
            let ended: @Sendable () -> Void = {
                // Unless something cut the wait short (its transaction took the jobs).
                let isStill = self.state.withLockedValue { state in
                    guard state.phase == .lingering(number) else { return false }
                    state.phase = .writing
                    return true
                }
                if isStill { self.writeQueuedJobs() }
            }
            // On a loop, the wait is a timer of that loop's, which is awake anyway serving its connections.
            if let loop {
                loop.scheduleTask(in: .nanoseconds(Int64(linger.nanoseconds)), ended)
            } else {
                DispatchQueue.global().asyncAfter(
                    deadline: .now() + .nanoseconds(Int(linger.nanoseconds)),
                    execute: ended
                )
            }
        }
    }

    /// Runs every queued job in one transaction on the database's writer queue, then the jobs queued meanwhile.
    private func writeQueuedJobs() {
        let jobs = self.state.withLockedValue { state in
            defer { state.jobs = [] }
            return state.jobs
        }
        let owner = self.owner
        if jobs.contains(where: { !$0.operations.isEmpty || $0.last != nil }) { self.store.willWriteTransfers() }
        self.store.database.asyncWriteWithoutTransaction { db in
            let result = Result { () throws -> Set<TransferID> in
                try Self.inImmediateTransaction(db) {
                    var leased: Set<TransferID> = []
                    var statements = PreparedStatements()
                    // By index, jobs and operations: iterating would copy each job, and each operation, out of its
                    // array.
                    for job in jobs.indices {
                        let operations = jobs[job].operations
                        var index = operations.startIndex
                        while index < operations.endIndex {
                            // A run of a batch's inserts goes in bulk.
                            if let run = Self.insertRun(operations, at: index) {
                                let taken = try StoreOperation.insertInBulk(
                                    run,
                                    db,
                                    owner: owner,
                                    statements: &statements
                                )
                                leased.formUnion(taken)
                                index += run.count
                                continue
                            }
                            try Self.apply(operations[index], db, owner, &statements, &leased)
                            index += 1
                        }
                        if let last = jobs[job].last { try Self.apply(last, db, owner, &statements, &leased) }
                        // A claim reads the rows as the operations before it left them.
                        if let body = jobs[job].body { try body(db) }
                    }
                    return leased
                }
            }
            switch result {
            case .success(let leased):
                if !leased.isEmpty { self.recordLeases(leased) }
            case .failure(let error):
                self.lastErrorBox.withLockedValue { $0 = error }
            }
            self.complete(jobs)
            let next = self.state.withLockedValue { state -> Start in
                state.transactionCount += 1
                if state.jobs.isEmpty {
                    state.phase = .idle
                    return .none
                }
                // Jobs that came while this transaction ran: publishing records wait for others again rather than
                // take a transaction at once. Without this wait, a busy writer ran transactions back to back, each
                // with the few records that came during the one before (2,000 small files: 360 transactions of 5
                // or 6 records, the writer's thread never idle).
                if state.jobs.allSatisfy({ $0.mayLinger }) {
                    state.lingerCount += 1
                    state.phase = .lingering(state.lingerCount)
                    return .afterLinger(self.linger, number: state.lingerCount, on: state.jobs.first?.loop)
                }
                state.phase = .writing
                return .now
            }
            self.start(next)
        }
    }

    /// The next ``SQL/bulkRows`` operations from `index` when they are all inserts; `nil` otherwise.
    private static func insertRun(_ operations: [StoreOperation], at index: Int) -> [InsertedRow]? {
        guard operations.endIndex - index >= SQL.bulkRows else { return nil }
        var run: [InsertedRow] = []
        run.reserveCapacity(SQL.bulkRows)
        for offset in 0..<SQL.bulkRows {
            guard case .insert(let item) = operations[index + offset] else { return nil }
            run.append(item)
        }
        return run
    }

    /// Applies one operation, and keeps `leased` up to date: the transfers whose lease the transaction took and kept.
    private static func apply(
        _ operation: StoreOperation,
        _ db: Database,
        _ owner: String,
        _ statements: inout PreparedStatements,
        _ leased: inout Set<TransferID>
    ) throws {
        if try operation.apply(db, owner: owner, statements: &statements), let id = operation.insertedID {
            leased.insert(id)
        }
        if let id = operation.releasedLease { leased.remove(id) }
    }

    /// Calls the jobs' completions after their transaction: on the writer queue for jobs without a loop; the others, in
    /// order, on one loop at a time (``OneAtATime``). The completions rename files, mostly into one folder, and two loops
    /// renaming into one folder at once contend for its lock: so a transaction's completions go to the first such job's
    /// loop in one task, unless a loop is running earlier ones: then they follow those, on that loop.
    private func complete(_ jobs: [Job]) {
        var loop: (any EventLoop)? = nil
        var completions: [@Sendable () -> Void] = []
        // By index: iterating copied each job whole (its operations, closures, loop and record counted once more from
        // this thread, and once less), for its completion and loop.
        for job in jobs.indices {
            guard let jobLoop = jobs[job].loop else {
                jobs[job].completion()
                continue
            }
            if loop == nil {
                loop = jobLoop
                completions.reserveCapacity(jobs.count - job)
            }
            completions.append(jobs[job].completion)
        }
        guard let loop else { return }
        self.loopCompletions.run(completions, on: loop)
    }

    /// Runs `body` in an immediate transaction, committed when it returns and rolled back when it throws: what GRDB's
    /// `inTransaction` does, with the `BEGIN` and `COMMIT` statements prepared once rather than parsed and prepared
    /// for every transaction. With a transaction per small file (its publishing record), preparing them cost the
    /// writer's thread 11–25 % of its CPU, and half the mallocs of a transaction.
    private static func inImmediateTransaction<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            let value = try body()
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            return value
        } catch {
            if db.isInsideTransaction { try? db.rollback() }
            throw error
        }
    }

    /// Remembers the leases inserts took in a transaction that just committed, except those that operations queued
    /// meanwhile give up (they run after it). Relied on until two seconds before the lease expires; a later claim
    /// asks the database.
    private func recordLeases(_ leased: Set<TransferID>) {
        let until = Date().timeIntervalSince1970 + TransferStore.insertLeaseDuration - 2
        self.state.withLockedValue { state in
            var leased = leased
            // By index, without concatenating: the queued operations hold whole rows, and copying them under the lock
            // cost the writer's thread about 5 % of its time on a list of small files.
            for index in state.pending.indices {
                if let id = state.pending[index].releasedLease { leased.remove(id) }
            }
            for job in state.jobs.indices {
                if let id = state.jobs[job].last?.releasedLease { leased.remove(id) }
                for index in state.jobs[job].operations.indices {
                    if let id = state.jobs[job].operations[index].releasedLease { leased.remove(id) }
                }
            }
            for id in leased { state.leasedAtInsert[id] = until }
        }
    }

    /// The last error writing to the store, if any.
    var lastError: (any Error)? { self.lastErrorBox.withLockedValue { $0 } }
}
