import Foundation

extension TransferManager {
    /// One transfer as the manager knows it.
    struct Record: Sendable {
        var request: TransferRequest
        var host: String
        var folder: URL
        var nameComponents: [String]
        var usesContentDisposition: Bool
        var conflictPolicy: ConflictPolicy
        var machine = Download.StateMachine()
        /// The batches waiting for this transfer (more than one when a submission joined it).
        var batches: [BatchID] = []
        var validator: Download.Validator?
        var receivedBytes: Int64 = 0
        var expectedBytes: Int64?
        var rate = RateEstimator()
        var lastProgressEvent: ContinuousClock.Instant?
        /// The byte count of the last progress event, so the final one is not sent twice.
        var lastReportedBytes: Int64 = -1
        var stopSignal: StopSignal?
        /// Why the partial file was discarded, each time it was.
        var restarts: [String] = []
        /// The transfer's own bandwidth limit while an attempt runs (made when it starts, from the request's limit,
        /// so that a limit set during the attempt reaches it); `nil` otherwise: no object per queued transfer.
        var bandwidth: BandwidthLimiter?
        /// When progress was last written to the store, and how much.
        var lastCheckpoint: (at: ContinuousClock.Instant, bytes: Int64)?
        /// When the running attempt started, while the store has not heard of it (its running state and validator):
        /// they are written with its first checkpoint, half a second in, or when it ends unfinished. A small file
        /// completes before that, and costs the store no write between its insert and its completion.
        var unsavedStart: ContinuousClock.Instant?

        /// A download's partial file; `nil` for an upload or a deletion.
        var partPath: String? {
            guard self.request.isDownload else { return nil }
            return Download.partPath(
                id: self.request.id,
                folderPath: Download.folderPath(of: self.folder),
                nameComponents: self.nameComponents
            )
        }

        var state: TransferState {
            switch self.machine.state {
            case .waiting: .waiting
            case .running(intent: .pause): .paused
            case .running: .running
            case .backingOff: .waitingToRetry
            case .paused: .paused
            case .finished(let state): state
            }
        }

        var progress: TransferProgress {
            TransferProgress(
                receivedBytes: self.receivedBytes,
                expectedBytes: self.expectedBytes,
                bytesPerSecond: self.rate.bytesPerSecond
            )
        }
    }

    /// A finished transfer, kept small: what queries, batch reports and a later submission of its identifier need.
    /// A batch of 100,000 files keeps 100,000 of these, so the request, the rate, the limiter and the rest of a
    /// ``Record`` are dropped when a transfer finishes (a record is about 500 bytes inline, with a parsed URL of
    /// about 430 bytes beside it; this is under 200 bytes in all).
    ///
    /// Its fields live in one immutable object, so the dictionary's slots stay 8 bytes wide (a dictionary of
    /// 100,000 entries has 262,144 slots).
    struct FinishedRecord: Sendable {
        private final class Storage: Sendable {
            let urlText: String
            let destination: TransferRequest.Destination
            let isDownload: Bool
            let result: TransferResult
            let attempts: Int
            let restarts: [String]
            let receivedBytes: Int64
            let expectedBytes: Int64?

            init(
                urlText: String,
                destination: TransferRequest.Destination,
                isDownload: Bool,
                result: TransferResult,
                attempts: Int,
                restarts: [String],
                receivedBytes: Int64,
                expectedBytes: Int64?
            ) {
                self.urlText = urlText
                self.destination = destination
                self.isDownload = isDownload
                self.result = result
                self.attempts = attempts
                self.restarts = restarts
                self.receivedBytes = receivedBytes
                self.expectedBytes = expectedBytes
            }
        }

        private let storage: Storage

        private init(_ storage: Storage) { self.storage = storage }

        /// What `record` leaves once it has finished with `result`. Read where the record is (a function's argument is
        /// borrowed, an initializer's is its own): the record is not copied out of the table first.
        static func of(_ record: Record, result: TransferResult) -> FinishedRecord {
            FinishedRecord(
                Storage(
                    urlText: record.request.url.absoluteString,
                    destination: record.request.destination,
                    isDownload: record.request.isDownload,
                    result: result,
                    attempts: record.machine.attempts,
                    restarts: record.restarts,
                    receivedBytes: record.receivedBytes,
                    expectedBytes: record.expectedBytes ?? record.request.expectedByteCount
                )
            )
        }

        /// The URL as text: a parsed `URL` takes about 430 bytes, its text about 100.
        var urlText: String { self.storage.urlText }
        var destination: TransferRequest.Destination { self.storage.destination }
        var isDownload: Bool { self.storage.isDownload }
        var result: TransferResult { self.storage.result }
        var attempts: Int { self.storage.attempts }
        var restarts: [String] { self.storage.restarts }
        var receivedBytes: Int64 { self.storage.receivedBytes }
        var expectedBytes: Int64? { self.storage.expectedBytes }

        var state: TransferState { self.result.state }

        var progress: TransferProgress {
            TransferProgress(receivedBytes: self.receivedBytes, expectedBytes: self.expectedBytes, bytesPerSecond: 0)
        }
    }

    /// One batch as the manager knows it.
    struct BatchRecord: Sendable {
        /// The report's line of each item, in the order they were added: its transfer and URL (as text, see
        /// ``FinishedRecord/urlText``) from the start, its result once ``settled`` says so. The report takes this
        /// array as it is when the batch ends, without a copy (a copy of 100,000 lines was the peak of the memory a
        /// long list takes); the batch then lets go of it.
        var items: [BatchReport.Item] = []
        /// Whether each item has its result in ``items``.
        var settled: [Bool] = []
        var finishedCount = 0
        /// The positions in ``items`` that wait for each transfer's result.
        var pending: [TransferID: [Int]] = [:]
        var tracker = BatchProgressTracker()
        var lastProgressEvent: ContinuousClock.Instant?
        var events: EventOutlet<BatchEvent>?
        var eventStream: AsyncStream<BatchEvent>?
        /// Which events ``events`` carries.
        var eventSelection = BatchEvent.Selection.all
        var waiters: [CheckedContinuation<BatchReport, Never>] = []
        /// Producers waiting until at most `limit` of the batch's items are unfinished.
        var roomWaiters: [(limit: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var report: BatchReport?
        /// Whether transfers may still be added before the batch can finish.
        var isSealed = true
        /// Whether ``Core/stopAll(aftermath:)`` ended it: nothing more is added, and the running transfers it left to
        /// end are settled as cancelled when they end paused.
        var isStopped = false

        var isFinished: Bool { self.report != nil }

        /// How many items have no result yet.
        var unfinishedCount: Int { self.settled.count - self.finishedCount }

        /// Lets the producers go whose limit the batch is now within.
        mutating func resumeRoomWaiters() {
            guard !self.roomWaiters.isEmpty else { return }
            let unfinished = self.unfinishedCount
            self.roomWaiters.removeAll { waiter in
                guard unfinished <= waiter.limit else { return false }
                waiter.continuation.resume()
                return true
            }
        }
    }

    /// A transfer waiting to be retried: the driver waits for `delay` or until `signal` fires.
    struct RetryWait: Sendable {
        var delay: Duration
        var signal: StopSignal
        /// The host held for the wait, because the server sent `Retry-After`.
        var heldHost: String?
    }

    /// What must happen after the lock is released: it calls out to code that may take the lock again.
    struct Aftermath: Sendable {
        var finishedStreams: [AsyncStream<BatchEvent>.Continuation] = []
        var removedFiles: [String] = []
        /// Stop signals to fire once the lock is released: firing one cancels its attempt's task (or ends a wait
        /// before a retry); none of that needs the lock.
        var stopSignals: [StopSignal] = []
        /// Transfers the scheduler started, each to run in a task of its own once the lock is released.
        var starts: [(id: TransferID, signal: StopSignal)] = []
        /// The manager's ``TransferManager/waitForTransfersToEnd()``, resumed once the manager has shut down and its
        /// last transfer task has ended.
        var endedWaiter: CheckedContinuation<Void, Never>?

        func perform() {
            self.endedWaiter?.resume()
            for signal in self.stopSignals { signal.fire() }
            for stream in self.finishedStreams { stream.finish() }
            for file in self.removedFiles { PartialFile.remove(file) }
        }
    }

    /// Everything the manager's lock protects.
    ///
    /// The lifecycle rules live in the pure ``Download/StateMachine`` and ``Scheduler/StateMachine``; the core applies
    /// their actions to the records and yields events (yielding to an `AsyncStream` only enqueues, so it is safe
    /// under the lock and keeps events in order). Finishing a stream and removing files happen after the lock.
    struct Core: Sendable {
        let configuration: Configuration
        /// Transfer tasks started and not yet ended; the manager's scope ends when it is 0 after the shutdown.
        var transferTasks = 0
        /// The scope's wait for the last transfer task once the manager has shut down.
        var endedWaiter: CheckedContinuation<Void, Never>?
        /// Where changes are recorded, when the manager has a store.
        let store: StoreWriter?
        /// The bandwidth limit over all transfers.
        let bandwidth: BandwidthLimiter
        var scheduler: Scheduler.StateMachine
        /// The transfers that have not finished (waiting, running, paused, waiting to retry).
        var transfers: [TransferID: Record] = [:]
        /// The transfers that have finished, compacted (a transfer is in one of the two, never both).
        var finished: [TransferID: FinishedRecord] = [:]
        var batches: [BatchID: BatchRecord] = [:]
        var nextBatchID = 1
        /// The byte counts of the attempts running now, sampled every progress interval.
        var progressCells: [TransferID: ProgressCell] = [:]
        var subscribers: [Int: EventOutlet<TransferEvent>] = [:]
        var nextSubscriberID = 0
        /// Schedules the release of held events; `nil` when events are handed over at once
        /// (``Configuration/eventDeliveryInterval`` zero).
        let eventClock: EventDeliveryClock?
        /// The batches and subscribers holding events, and whether their release is scheduled.
        var holdingBatches: [BatchID] = []
        var holdingSubscribers: [Int] = []
        var isReleaseScheduled = false
        /// Subscribers to the running-transfer count, and the count they last heard.
        var activitySubscribers: [Int: AsyncStream<Int>.Continuation] = [:]
        var reportedRunningCount = 0
        /// The last folder's path and the last destination's stored path: a batch's transfers share them, and taking
        /// a URL's path costs a microsecond or two, once per plan and twice per stored row.
        var folderPaths = LastPath()
        var storedPaths = LastPath()
        /// The last request's origin: a batch's transfers share it (see ``LastOrigin``).
        var lastOrigin = LastOrigin()
        /// Where new observers go to get a delivery task.
        let deliveries: AsyncStream<ObserverMailbox>.Continuation
        /// The observers of every transfer, and those of one transfer, by token.
        var observers = Observers()
        var isShutDown = false

        init(
            configuration: Configuration,
            deliveries: AsyncStream<ObserverMailbox>.Continuation,
            store: StoreWriter?,
            eventClock: EventDeliveryClock? = nil
        ) {
            self.configuration = configuration
            self.eventClock = eventClock
            self.deliveries = deliveries
            self.store = store
            self.bandwidth = BandwidthLimiter(bytesPerSecond: configuration.bandwidthLimit)
            self.scheduler = Scheduler.StateMachine(
                maximumConcurrent: configuration.maximumConcurrentTransfers,
                maximumPerHost: configuration.maximumTransfersPerHost
            )
        }

        // MARK: Submitting

        /// Creates a batch; with a store, `storedID` is the identifier the store gave it.
        mutating func makeBatch(sealed: Bool, storedID: BatchID? = nil) -> BatchID {
            let id = storedID ?? BatchID(self.nextBatchID)
            self.nextBatchID = max(self.nextBatchID, id.rawValue) + 1
            var batch = BatchRecord()
            batch.isSealed = sealed
            self.batches[id] = batch
            return id
        }

        /// The most transfers the tables are made room for at once: a longer list is fed a window at a time (`haul`
        /// keeps 4,096 queued), and a table sized for all of it would spread a window's records over pages it never
        /// fills.
        static let reservationLimit = 4_096

        /// Makes room in the per-transfer tables for `count` more transfers (at most ``reservationLimit``), once,
        /// before they are added. Grown one doubling at a time instead, under the lock, each table moved every record
        /// into memory it had to fault in (this machine is slow at that). 2,000 small files, `perf` over 10 runs: the
        /// cooperative thread's time adding them 8.9 → 7.7 ms a run, the table's insertions 3.1 → 1.8 ms (what is
        /// left is the first touch of the table's pages); wall time inside the noise.
        mutating func reserveCapacity(forMoreTransfers count: Int) {
            let count = min(count, Self.reservationLimit)
            self.transfers.reserveCapacity(self.transfers.count + count)
            self.scheduler.reserveCapacity(forMoreWaiting: count)
        }

        /// Adds a request to a batch: a new transfer, a join of a known one, a file the store knows is complete, or
        /// an immediate failure. `persisted` is what the store knew of the request, read before the lock.
        mutating func add(
            _ request: TransferRequest,
            to batchID: BatchID,
            persisted: Persisted? = nil,
            aftermath: inout Aftermath
        ) {
            let now = ContinuousClock.now
            let index = self.withBatch(batchID) { batch in
                // A placeholder result until the item settles.
                batch.items.append(
                    BatchReport.Item(
                        id: request.id,
                        urlText: request.url.absoluteString,
                        result: .cancelled,
                        attempts: 0,
                        restarts: []
                    )
                )
                batch.settled.append(false)
                return batch.items.count - 1
            }!
            if let existing = self.transfers[request.id] {
                guard existing.request.url == request.url, existing.request.destination == request.destination else {
                    let other = existing.request.url.absoluteString
                    self.refuseDuplicate(request, of: other, index: index, in: batchID, at: now, &aftermath)
                    return
                }
                self.batches[batchID]!.pending[request.id, default: []].append(index)
                self.join(request.id, batchID: batchID, at: now, aftermath: &aftermath)
                return
            }
            if let existing = self.finished[request.id] {
                guard existing.urlText == request.url.absoluteString, existing.destination == request.destination else {
                    self.refuseDuplicate(request, of: existing.urlText, index: index, in: batchID, at: now, &aftermath)
                    return
                }
                // A completed download whose file has since been deleted (a model removed, say) starts afresh.
                var fileIsGone = false
                if case .completed(let file) = existing.result, existing.isDownload {
                    fileIsGone = !PartialFile.exists(file.path.path)
                }
                if existing.state == .completed && !fileIsGone {
                    self.batches[batchID]!.tracker.added(request.id, expectedBytes: existing.expectedBytes)
                    self.settle(index: index, in: batchID, result: existing.result, at: now, aftermath: &aftermath)
                    return
                }
                // It failed, was cancelled or skipped: a new submission starts it afresh.
                self.finished[request.id] = nil
            }
            // The host checked before the record is made: asking the optional record whether it is `nil` took a
            // copy of it (860 instructions a request; a record's layout is known only at run time, through URL's).
            guard let host = self.lastOrigin.origin(of: request.url) else {
                let error = HaulError(
                    .invalidRequest,
                    "Only http and https URLs with a host are supported: \(request.url.absoluteString)"
                )
                self.settle(index: index, in: batchID, result: .failed(error), at: now, aftermath: &aftermath)
                return
            }
            // Optional, to be moved into the table at the end (`take()`): a record assigned there from a local was
            // copied whole (a reference count for each of its strings, URL and arrays), and the local released.
            var newRecord: Record? = Self.makeRecord(for: request, host: host, configuration: self.configuration)
            // A completed row the request finds again is no one's to change (its file is there unchanged, or the
            // row is reopened below), so it keeps the lease its publisher left; any other row's lease left by a
            // process that is gone is released before anything else is recorded.
            let isCompletedRow = persisted?.row.state == TransferState.completed.description
            if let persisted {
                persisted.restore(into: &newRecord!)
                if let holder = persisted.staleLeaseOwner, !isCompletedRow {
                    self.store?.enqueue(.releaseLease(request.id, holder: holder))
                }
            }
            if let completed = persisted?.completedFile {
                // Completed by an earlier process, and the file is still there unchanged: no request at all.
                newRecord!.machine = Download.StateMachine(finished: .completed)
                newRecord!.receivedBytes = completed.byteCount
                newRecord!.expectedBytes = completed.byteCount
                let record = newRecord.take()!
                self.transfers[request.id] = record
                if isCompletedRow {
                    // Recorded in full already, and the file matches the record: only the batch is new.
                    self.store?.enqueue(.joinBatch(batchID: batchID, position: index, request.id))
                } else {
                    self.store?.enqueue(self.insert(record, state: .completed, as: index, of: batchID))
                    // Recorded in full: a file found through the publishing record of a killed process has no result
                    // yet.
                    self.store?.enqueue(.completed(request.id, completed, modified: completed.modificationTime))
                }
                self.batches[batchID]!.tracker.added(request.id, expectedBytes: completed.byteCount)
                self.settle(index: index, in: batchID, result: .completed(completed), at: now, aftermath: &aftermath)
                self.retire(request.id, result: .completed(completed))
                return
            }
            newRecord!.batches = [batchID]
            // Out of the optional before it is read: `self.insert(newRecord!, ...)` copied it for the call (1,700
            // instructions a request, with the copy's release), and `consume` moves it into the table.
            let record = newRecord.take()!
            if let store = self.store {
                if let persisted, isCompletedRow {
                    // Completed, but its file is gone or changed: downloaded again.
                    store.enqueue(
                        .reopen(
                            request.id,
                            completedAt: persisted.row.updatedAt,
                            staleHolder: persisted.staleLeaseOwner
                        )
                    )
                }
                store.enqueue(self.insert(record, state: .waiting, as: index, of: batchID))
            }
            let (expectedBytes, receivedBytes) = (record.expectedBytes, record.receivedBytes)
            self.transfers[request.id] = consume record
            self.withBatch(batchID) { batch in
                batch.pending[request.id, default: []].append(index)
                batch.tracker.added(request.id, expectedBytes: expectedBytes ?? request.expectedByteCount)
                if receivedBytes > 0 {
                    batch.tracker.progressed(request.id, receivedBytes: receivedBytes, expectedBytes: expectedBytes)
                }
            }
            self.emit(request.id, .queued)
            self.start(
                self.scheduler.enqueue(request.id, host: host, priority: request.priority),
                aftermath: &aftermath
            )
        }

        /// Fails the item at `index`: its identifier already names a transfer of another URL or destination.
        private mutating func refuseDuplicate(
            _ request: TransferRequest,
            of otherURL: String,
            index: Int,
            in batchID: BatchID,
            at now: ContinuousClock.Instant,
            _ aftermath: inout Aftermath
        ) {
            let error = HaulError(
                .duplicateTransfer,
                "The identifier \(request.id) already names a transfer of \(otherURL)"
            )
            self.settle(index: index, in: batchID, result: .failed(error), at: now, aftermath: &aftermath)
        }

        /// Adds an unfinished transfer to another batch that waits for it.
        private mutating func join(
            _ id: TransferID,
            batchID: BatchID,
            at now: ContinuousClock.Instant,
            aftermath: inout Aftermath
        ) {
            let joined = self.withTransfer(id) { record in
                if !record.batches.contains(batchID) { record.batches.append(batchID) }
                return (record.expectedBytes, record.request.expectedByteCount, record.receivedBytes)
            }
            guard let (expectedBytes, requestedBytes, receivedBytes) = joined else { return }
            self.withBatch(batchID) { batch in
                batch.tracker.added(id, expectedBytes: expectedBytes ?? requestedBytes)
                batch.tracker.progressed(id, receivedBytes: receivedBytes, expectedBytes: expectedBytes)
            }
        }

        static func makeRecord(
            for request: TransferRequest,
            host hostKey: String,
            configuration: Configuration
        ) -> Record {
            guard request.isDownload else {
                // Uploads and deletions write nothing locally: no folder, no names, no partial file.
                return Record(
                    request: request,
                    host: hostKey,
                    folder: URL(filePath: "/", directoryHint: .isDirectory),
                    nameComponents: [],
                    usesContentDisposition: false,
                    conflictPolicy: request.conflictPolicy ?? configuration.conflictPolicy,
                    expectedBytes: request.expectedByteCount
                )
            }
            switch request.destination {
            case .file(let path):
                return Record(
                    request: request,
                    host: hostKey,
                    folder: path.deletingLastPathComponent(),
                    nameComponents: [path.lastPathComponent],
                    usesContentDisposition: false,
                    conflictPolicy: request.conflictPolicy ?? configuration.conflictPolicy
                )
            case .folder(let folder):
                let naming = request.naming ?? configuration.naming
                let usesContentDisposition = if case .contentDisposition = naming.base { true } else { false }
                return Record(
                    request: request,
                    host: hostKey,
                    folder: folder,
                    nameComponents: FileNaming.name(for: request.id, url: request.url, policy: naming),
                    usesContentDisposition: usesContentDisposition,
                    conflictPolicy: request.conflictPolicy ?? configuration.conflictPolicy
                )
            }
        }

        // MARK: Running

        /// Marks transfers the scheduler chose as running, each to run in a task of its own made once the lock is
        /// released (``Aftermath/starts``); tells the activity subscribers when the running count changed (every
        /// change of it passes through here).
        private mutating func start(_ ids: [TransferID], aftermath: inout Aftermath) {
            defer {
                let running = self.scheduler.slotsInUse
                if running != self.reportedRunningCount {
                    self.reportedRunningCount = running
                    for subscriber in self.activitySubscribers.values { subscriber.yield(running) }
                }
            }
            for id in ids {
                let signal = StopSignal()
                let receivedBytes = self.withTransfer(id) { record in
                    record.machine.started()
                    record.stopSignal = signal
                    record.bandwidth = BandwidthLimiter(bytesPerSecond: record.request.bandwidthLimit)
                    return record.receivedBytes
                }
                self.progressCells[id] = ProgressCell(receivedBytes!)
                aftermath.starts.append((id, signal))
                self.transferTasks += 1
            }
        }

        /// A transfer's task has ended (its attempt and any wait for a retry are over).
        mutating func transferTaskEnded(aftermath: inout Aftermath) {
            self.transferTasks -= 1
            self.endWaitIfTransfersEnded(aftermath: &aftermath)
        }

        /// Ends the scope's wait once the manager has shut down and no transfer task is left.
        mutating func endWaitIfTransfersEnded(aftermath: inout Aftermath) {
            guard self.isShutDown, self.transferTasks == 0, let waiter = self.endedWaiter else { return }
            self.endedWaiter = nil
            aftermath.endedWaiter = waiter
        }

        /// A running transfer's body has arrived: its slots go to the next transfers while it publishes its file.
        /// Returns whether other transfers still hold slots once this one's went to the next: slots in use, not
        /// running transfers, which count those publishing (this one among them).
        mutating func leftNetwork(_ id: TransferID, aftermath: inout Aftermath) -> Bool {
            self.start(self.scheduler.leftNetwork(id), aftermath: &aftermath)
            return self.scheduler.slotsInUse > 0
        }

        /// The plan for the attempt of a transfer the scheduler started (nil if it is no longer running).
        mutating func plan(for id: TransferID) -> Download.Plan? {
            guard let folder = self.withTransfer(id, { $0.folder }) else { return nil }
            let folderPath = self.folderPaths.path(of: folder, Download.folderPath(of:))
            let (configuration, bandwidth, progressCell) = (self.configuration, self.bandwidth, self.progressCells[id])
            // Through the in-place accessor: the record's fields are read where they are, not copied out whole.
            return self.withTransfer(id) { record -> Download.Plan? in
                Self.plan(
                    for: id,
                    record: record,
                    folderPath: folderPath,
                    configuration: configuration,
                    bandwidth: bandwidth,
                    progressCell: progressCell
                )
            } ?? nil
        }

        private static func plan(
            for id: TransferID,
            record: Record,
            folderPath: String,
            configuration: Configuration,
            bandwidth: BandwidthLimiter,
            progressCell: ProgressCell?
        ) -> Download.Plan? {
            guard record.stopSignal != nil else { return nil }
            var headers = record.request.headers
            if !headers.contains(where: { $0.name.lowercased() == "user-agent" }) {
                headers.append(("User-Agent", configuration.userAgent))
            }
            return Download.Plan(
                Download.Plan.Fixed(
                    id: id,
                    operation: record.request.operation,
                    url: record.request.url,
                    headers: headers,
                    folder: record.folder,
                    folderPath: folderPath,
                    usesContentDisposition: record.usesContentDisposition,
                    conflictPolicy: record.conflictPolicy,
                    expectedByteCount: record.request.expectedByteCount,
                    checksum: record.request.checksum,
                    computesSHA256: record.request.computesSHA256,
                    synchronizesFiles: configuration.synchronizesFiles,
                    namesFilesWhenPublished: configuration.writesSmallFilesUnnamed ?? (configuration.store == nil),
                    progress: progressCell ?? ProgressCell(record.receivedBytes),
                    maximumFileSize: configuration.maximumFileSize,
                    lowSpeedLimit: configuration.lowSpeedLimit,
                    idleTimeout: configuration.idleTimeout,
                    bandwidth: bandwidth,
                    transferBandwidth: record.bandwidth,
                    hooks: configuration.hooks,
                    attempt: record.machine.attempts
                ),
                nameComponents: record.nameComponents,
                validator: record.validator
            )
        }

        /// A running attempt ended; returns the wait the driver must do before ``retryWaitEnded(_:_:aftermath:)``
        /// when the transfer will be retried.
        mutating func attemptEnded(
            _ id: TransferID,
            outcome: Download.AttemptOutcome,
            aftermath: inout Aftermath
        ) -> RetryWait? {
            let now = ContinuousClock.now
            let machineOutcome: Download.StateMachine.Outcome? =
                switch outcome {
                case .completed: .completed
                case .failed: .failed
                case .skipped: .skipped
                case .stopped: nil
                }
            var retryDelay: Duration?
            if case .failed(let error) = outcome {
                retryDelay = self.configuration.retryPolicy.delay(
                    afterAttempt: self.withTransfer(id) { $0.machine.attempts }!,
                    failingWith: error,
                    retryAfter: error.retryAfter,
                    random: .random(in: 0...1)
                )
            }
            if let cell = self.progressCells.removeValue(forKey: id) {
                let checkpoint: Checkpoint = if case .completed = outcome { .never } else { .now }
                self.progressed(id, receivedBytes: cell.load(), at: now, checkpoint: checkpoint)
            }
            let (action, host, attempts) = self.withTransfer(id) { record in
                let action = record.machine.attemptEnded(machineOutcome, retryDelay: retryDelay)
                record.stopSignal = nil
                record.bandwidth = nil
                return (action, record.host, record.machine.attempts)
            }!
            if case .scheduleRetry(let delay) = action, case .failed(let error) = outcome {
                let signal = StopSignal()
                self.withTransfer(id) { $0.stopSignal = signal }
                // Retry-After speaks for the whole host: hold it before the freed slot goes to another transfer.
                if error.retryAfter != nil { self.scheduler.hold(host) }
                self.emit(id, .retrying(attempt: attempts, delay: delay, error: error))
                self.start(self.scheduler.runningEnded(id), aftermath: &aftermath)
                return RetryWait(delay: delay, signal: signal, heldHost: error.retryAfter != nil ? host : nil)
            }
            let nextStarts = self.scheduler.runningEnded(id)
            let result: TransferResult =
                switch outcome {
                case .completed(let file): .completed(file)
                case .failed(let error): .failed(error)
                case .skipped(let existing): .skipped(existing: existing)
                case .stopped: .cancelled
                }
            self.apply(action, to: id, result: result, at: now, aftermath: &aftermath)
            self.start(nextStarts, aftermath: &aftermath)
            return nil
        }

        /// The wait before a retry ended (its delay passed, or a pause or cancel cut it short).
        mutating func retryWaitEnded(_ id: TransferID, _ wait: RetryWait, aftermath: inout Aftermath) {
            if let host = wait.heldHost { self.start(self.scheduler.release(host), aftermath: &aftermath) }
            guard self.transfers[id] != nil else { return }
            let action = self.transfers[id]!.machine.retryDue()
            self.apply(action, to: id, result: nil, at: .now, aftermath: &aftermath)
        }

        // MARK: Control

        mutating func pause(_ id: TransferID, aftermath: inout Aftermath) {
            guard self.transfers[id] != nil else { return }
            let action = self.transfers[id]!.machine.pause()
            self.apply(action, to: id, result: nil, at: .now, aftermath: &aftermath)
        }

        mutating func resume(_ id: TransferID, aftermath: inout Aftermath) {
            guard self.transfers[id] != nil, !self.isShutDown else { return }
            let action = self.transfers[id]!.machine.resume()
            self.apply(action, to: id, result: nil, at: .now, aftermath: &aftermath)
        }

        /// Sets, changes or removes one transfer's bandwidth limit; a running attempt feels it at its next chunk.
        mutating func setBandwidthLimit(_ bytesPerSecond: Int64?, of id: TransferID) {
            guard let record = self.transfers[id] else { return }
            self.transfers[id]!.request.bandwidthLimit = bytesPerSecond
            record.bandwidth?.setLimit(bytesPerSecond)
        }

        mutating func setPriority(_ priority: Int, of id: TransferID) {
            guard self.transfers[id] != nil else { return }
            self.transfers[id]!.request.priority = priority
            self.scheduler.setPriority(priority, of: id)
        }

        mutating func cancel(_ id: TransferID, aftermath: inout Aftermath) {
            guard self.transfers[id] != nil else { return }
            let action = self.transfers[id]!.machine.cancel()
            self.apply(action, to: id, result: .cancelled, at: .now, aftermath: &aftermath)
        }

        /// Cancels a batch: its transfers stop, except those another unfinished batch also waits for, which leave
        /// this batch as cancelled and go on for the other.
        mutating func cancel(batch batchID: BatchID, aftermath: inout Aftermath) {
            guard let batch = self.batches[batchID], !batch.isFinished else { return }
            for id in batch.pending.keys {
                if let record = self.transfers[id], record.batches.count > 1, record.batches.contains(batchID) {
                    self.transfers[id]!.batches.removeAll { $0 == batchID }
                    self.settle(id, in: batchID, result: .cancelled, at: .now, aftermath: &aftermath)
                } else {
                    self.cancel(id, aftermath: &aftermath)
                }
            }
        }

        /// Stops everything for good: the manager's scope is ending. With a store, transfers are stopped and keep
        /// their partial files (a later manager resumes them); without one, they are cancelled.
        mutating func shutDown(aftermath: inout Aftermath) {
            guard !self.isShutDown else { return }
            self.isShutDown = true
            defer { self.endWaitIfTransfersEnded(aftermath: &aftermath) }
            if self.store != nil {
                self.stopAll(aftermath: &aftermath)
            } else {
                for id in Array(self.transfers.keys) { self.cancel(id, aftermath: &aftermath) }
            }
        }

        /// Stops every transfer, keeping partial files and the store's record of them, and ends every batch with
        /// what was unfinished reported as cancelled. A running transfer is left to end with its own result, which
        /// its batches wait for (its task stops at once; paused, it is cancelled in them): one whose body arrived as
        /// the stop came, or that was publishing its file, completes, and was reported cancelled while its file
        /// appeared, completed in the store (33 of 2,172 "cancelled" files when a list of tiny files was interrupted).
        mutating func stopAll(aftermath: inout Aftermath) {
            for id in Array(self.transfers.keys) { self.pause(id, aftermath: &aftermath) }
            for batchID in Array(self.batches.keys) {
                guard let pending = self.batches[batchID]?.pending, self.batches[batchID]?.isFinished == false else {
                    continue
                }
                for id in pending.keys where !self.isRunning(id) {
                    self.settle(id, in: batchID, result: .cancelled, at: .now, aftermath: &aftermath)
                }
                self.batches[batchID]!.isSealed = true
                self.batches[batchID]!.isStopped = true
                self.finishIfDone(batchID, aftermath: &aftermath)
            }
        }

        /// Whether a transfer's attempt is under way (stopping included).
        private func isRunning(_ id: TransferID) -> Bool {
            if case .running = self.transfers[id]?.machine.state { true } else { false }
        }

        private mutating func apply(
            _ action: Download.StateMachine.Action,
            to id: TransferID,
            result: TransferResult?,
            at now: ContinuousClock.Instant,
            aftermath: inout Aftermath
        ) {
            switch action {
            case .none:
                break
            case .dequeueAndReportPaused:
                self.scheduler.removeWaiting(id)
                self.emit(id, .paused)
            case .enqueueAndReportResumed:
                self.emit(id, .resumed)
                self.start(
                    self.scheduler.enqueue(
                        id,
                        host: self.transfers[id]!.host,
                        priority: self.transfers[id]!.request.priority
                    ),
                    aftermath: &aftermath
                )
            case .stopAttempt:
                if let signal = self.transfers[id]!.stopSignal { aftermath.stopSignals.append(signal) }
            case .reportPaused:
                self.emit(id, .paused)
                // A running transfer ``stopAll(aftermath:)`` left to end ended stopped: its stopped batches take it
                // as the others, cancelled.
                if let batchIDs = self.transfers[id]?.batches {
                    for batchID in batchIDs
                    where self.batches[batchID]?.isStopped == true && self.batches[batchID]?.pending[id] != nil {
                        self.settle(id, in: batchID, result: .cancelled, at: now, aftermath: &aftermath)
                        self.finishIfDone(batchID, aftermath: &aftermath)
                    }
                }
            case .enqueue:
                self.start(
                    self.scheduler.enqueue(
                        id,
                        host: self.transfers[id]!.host,
                        priority: self.transfers[id]!.request.priority
                    ),
                    aftermath: &aftermath
                )
            case .scheduleRetry:
                preconditionFailure("A retry is scheduled only when an attempt ends")
            case .stopRetryWaitAndReportPaused:
                if let signal = self.transfers[id]!.stopSignal { aftermath.stopSignals.append(signal) }
                self.emit(id, .paused)
            case .stopRetryWaitAndFinish(let outcome):
                if let signal = self.transfers[id]!.stopSignal { aftermath.stopSignals.append(signal) }
                self.apply(
                    .finish(outcome, removePartialFile: true, dequeue: false),
                    to: id,
                    result: result,
                    at: now,
                    aftermath: &aftermath
                )
            case .finish(let outcome, let removePartialFile, let dequeue):
                if dequeue { self.scheduler.removeWaiting(id) }
                if removePartialFile, let partPath = self.withTransfer(id, { $0.partPath }) ?? nil {
                    aftermath.removedFiles.append(partPath)
                }
                let finalResult: TransferResult = outcome == .cancelled ? .cancelled : (result ?? .cancelled)
                self.finish(id, result: finalResult, at: now, aftermath: &aftermath)
            }
        }

        // MARK: Progress and events

        mutating func attemptStarted(_ id: TransferID, offset: Int64) {
            // An upload sends its body from the start again, but its progress never goes back.
            self.withTransfer(id) { record in
                if record.request.isDownload { record.receivedBytes = offset }
                record.unsavedStart = ContinuousClock.now
            }
            self.emit(id, .started(offset: offset))
        }

        mutating func responseAccepted(
            _ id: TransferID,
            validator: Download.Validator,
            expectedBytes: Int64?,
            receivedBytes: Int64
        ) {
            // Whether there is a store, not the store itself: a reference taken here would be counted from every
            // loop's thread on an object the writer's thread counts too (as in `progressed`).
            let hasStore = self.store != nil
            let updated = self.withTransfer(id) { record in
                record.validator = validator.ifRangeValue == nil ? nil : validator
                record.expectedBytes = expectedBytes ?? record.request.expectedByteCount
                record.receivedBytes = receivedBytes
                // Written now only when the start was (a restart within the attempt); else with the start.
                let validator =
                    hasStore && record.unsavedStart == nil ? Self.validatorOperation(of: record, id: id) : nil
                return (record.batches, record.expectedBytes, validator)
            }
            guard let (batches, expected, validator) = updated else { return }
            if let validator { self.store?.enqueue(validator) }
            for batchID in batches {
                self.withBatch(batchID) {
                    $0.tracker.progressed(id, receivedBytes: receivedBytes, expectedBytes: expected)
                }
            }
        }

        mutating func restarted(_ id: TransferID, reason: String) {
            self.transfers[id]?.receivedBytes = 0
            self.transfers[id]?.restarts.append(reason)
            self.emit(id, .restarted(reason: reason))
        }

        /// Samples the byte counts of the running attempts: called every progress interval.
        mutating func sampleProgress(at now: ContinuousClock.Instant) {
            for (id, cell) in self.progressCells { self.progressed(id, receivedBytes: cell.load(), at: now) }
        }

        /// When a byte count is written to the store.
        enum Checkpoint {
            /// When the last one is old enough (``checkpointInterval`` with new bytes, else ``leaseRenewalInterval``).
            case whenDue
            /// Now: the attempt ended unfinished, and a later one (perhaps in another process) resumes from it.
            case now
            /// Not: the attempt completed, and the completion records the count.
            case never
        }

        mutating func progressed(
            _ id: TransferID,
            receivedBytes: Int64,
            at now: ContinuousClock.Instant,
            checkpoint: Checkpoint = .whenDue
        ) {
            // Whether there is a store, not the store itself: taking a reference to it for every chunk of every file
            // counted it from each loop's thread on an object the writer's thread counts too.
            let hasStore = self.store != nil
            let progressInterval = self.configuration.progressInterval
            // Publishing its file: its completion is being recorded (``StoreOperation/publishing``), and no periodic
            // checkpoint may follow and say running again.
            let checkpoint = checkpoint == .whenDue && self.scheduler.hasLeftNetwork(id) ? .never : checkpoint
            let updated = self.withTransfer(id) { record in
                Self.progressed(
                    &record,
                    id: id,
                    receivedBytes: receivedBytes,
                    at: now,
                    checkpoint: hasStore ? checkpoint : .never,
                    progressInterval: progressInterval
                )
            }
            guard let (due, progress, batches, expectedBytes, writes) = updated else { return }
            if !writes.isEmpty, let store = self.store {
                for write in writes { store.enqueue(write) }
            }
            if due { self.emit(id, .progressed(progress)) }
            for batchID in batches {
                self.withBatch(batchID) {
                    $0.tracker.progressed(id, receivedBytes: receivedBytes, expectedBytes: expectedBytes)
                }
                self.emitBatchProgress(batchID, at: now, force: false)
            }
        }

        /// Updates a record for a new byte count; returns whether a progress event is due, what the caller needs for
        /// the events, and the store's operations for the checkpoint when one is due (none with `checkpoint` never).
        private static func progressed(
            _ record: inout Record,
            id: TransferID,
            receivedBytes: Int64,
            at now: ContinuousClock.Instant,
            checkpoint: Checkpoint,
            progressInterval: Duration
        ) -> (
            due: Bool, progress: TransferProgress, batches: [BatchID], expectedBytes: Int64?, writes: [StoreOperation]
        ) {
            let changed = receivedBytes != record.lastReportedBytes
            record.receivedBytes = receivedBytes
            record.rate.record(totalBytes: receivedBytes, at: now)
            let due = changed && (record.lastProgressEvent.map { now - $0 >= progressInterval } ?? true)
            if due {
                record.lastProgressEvent = now
                record.lastReportedBytes = receivedBytes
            }
            // A checkpoint when the count changed (at most every 500 ms), and at least every 10 s to renew the lease;
            // the first one also writes the start, half a second in, whether or not bytes came.
            let checkpointIsDue =
                switch checkpoint {
                case .now: true
                case .never: false
                case .whenDue:
                    if let start = record.unsavedStart {
                        now - start >= Self.checkpointInterval
                    } else {
                        record.lastCheckpoint.map({
                            now - $0.at
                                >= (receivedBytes != $0.bytes ? Self.checkpointInterval : Self.leaseRenewalInterval)
                        }) ?? true
                    }
                }
            var writes: [StoreOperation] = []
            if checkpointIsDue {
                if record.unsavedStart != nil {
                    record.unsavedStart = nil
                    writes.append(.state(id, .running, attempts: record.machine.attempts))
                    writes.append(Self.validatorOperation(of: record, id: id))
                }
                record.lastCheckpoint = (now, receivedBytes)
                writes.append(.checkpoint(id, bytesOnDisk: receivedBytes))
            }
            return (due, record.progress, record.batches, record.expectedBytes, writes)
        }

        /// Records a transfer's end, in each batch that waits for it.
        private mutating func finish(
            _ id: TransferID,
            result: TransferResult,
            at now: ContinuousClock.Instant,
            aftermath: inout Aftermath
        ) {
            let finished = self.withTransfer(id) { record in
                if case .completed(let file) = result {
                    record.receivedBytes = file.byteCount
                    record.expectedBytes = file.byteCount
                }
                let lastProgress: TransferProgress? =
                    if case .completed = result, record.lastReportedBytes != record.receivedBytes {
                        record.progress
                    } else {
                        nil
                    }
                return (record.batches, lastProgress)
            }
            guard let (batches, lastProgress) = finished else { return }
            if let lastProgress { self.emit(id, .progressed(lastProgress)) }
            self.emit(id, .finished(result))
            self.withTransfer(id) { $0.batches = [] }
            for batchID in batches {
                self.settle(id, in: batchID, result: result, at: now, aftermath: &aftermath, emitted: true)
            }
            self.retire(id, result: result)
        }

        /// Moves a finished transfer out of ``transfers`` into its compact form in ``finished``.
        private mutating func retire(_ id: TransferID, result: TransferResult) {
            // Read in place, then removed: taken out whole, the record was copied, and released twice.
            guard let index = self.transfers.index(forKey: id) else { return }
            self.finished[id] = self.withTransfer(id) { FinishedRecord.of($0, result: result) }
            self.transfers.remove(at: index)
        }

        /// A transfer's state, whether it is unfinished or finished.
        func state(of id: TransferID) -> TransferState? {
            self.transfers[id]?.state ?? self.finished[id]?.state
        }

        /// A transfer's progress, whether it is unfinished or finished.
        func progress(of id: TransferID) -> TransferProgress? {
            self.transfers[id]?.progress ?? self.finished[id]?.progress
        }

        /// Whether this manager has met each of `requests` (``knows(_:)-(TransferID)``). A method of its own: written
        /// as `requests.map { core.knows($0.id) }` under the lock, each request and the whole core were copied for
        /// each identifier (3,300 instructions a request, `callgrind`).
        func knows(_ requests: [TransferRequest]) -> [Bool] {
            requests.indices.map { self.knows(requests[$0].id) }
        }

        /// Whether this manager knows the identifier.
        func knows(_ id: TransferID) -> Bool {
            // By index: `transfers[id] != nil` would copy the record out.
            self.transfers.index(forKey: id) != nil || self.finished.index(forKey: id) != nil
        }

        /// Gives a transfer its result in one batch, and ends the batch when that was its last transfer.
        private mutating func settle(
            _ id: TransferID,
            in batchID: BatchID,
            result: TransferResult,
            at now: ContinuousClock.Instant,
            aftermath: inout Aftermath,
            emitted: Bool = false
        ) {
            guard let indices = self.withBatch(batchID, { $0.pending.removeValue(forKey: id) }) ?? nil else { return }
            for index in indices {
                self.settle(index: index, in: batchID, result: result, at: now, aftermath: &aftermath, emitted: emitted)
            }
        }

        /// Gives the item at `index` of a batch its result.
        private mutating func settle(
            index: Int,
            in batchID: BatchID,
            result: TransferResult,
            at now: ContinuousClock.Instant,
            aftermath: inout Aftermath,
            emitted: Bool = false
        ) {
            let unsettled = self.withBatch(batchID) { batch in
                batch.settled[index] ? nil : (batch.items[index].id, batch.items[index].urlText)
            }
            guard let (id, urlText) = unsettled ?? nil else { return }
            // The record is this item's transfer unless the item failed before it had one (a clash of identifiers).
            var attempts = 0
            var restarts: [String] = []
            let current = self.withTransfer(id) { record in
                record.request.url.absoluteString == urlText ? (record.machine.attempts, record.restarts) : nil
            }
            if let current = current ?? nil {
                (attempts, restarts) = current
            } else if let record = self.finished[id], record.urlText == urlText {
                (attempts, restarts) = (record.attempts, record.restarts)
            }
            let item = BatchReport.Item(
                id: id,
                urlText: urlText,
                result: result,
                attempts: attempts,
                restarts: restarts
            )
            let byteCount: Int64? = if case .completed(let file) = result { file.byteCount } else { nil }
            let firstHeld = self.withBatch(batchID) { batch in
                var firstHeld = false
                if !emitted, batch.events != nil, batch.eventSelection.includes(.finished(result)) {
                    let event = TransferEvent(id: id, url: item.url, kind: .finished(result))
                    firstHeld = batch.events!.send(.transfer(event))
                }
                batch.items[index] = item
                batch.settled[index] = true
                batch.finishedCount += 1
                batch.resumeRoomWaiters()
                batch.tracker.added(id, expectedBytes: byteCount)
                batch.tracker.finished(id, state: result.state, byteCount: byteCount)
                return firstHeld
            }
            if firstHeld == true { self.holdsEvents(ofBatch: batchID) }
            self.emitBatchProgress(batchID, at: now, force: true)
            self.finishIfDone(batchID, aftermath: &aftermath)
        }

        mutating func finishIfDone(_ batchID: BatchID, aftermath: inout Aftermath) {
            self.withBatch(batchID) { batch in
                guard batch.isSealed, !batch.isFinished, batch.finishedCount == batch.settled.count else { return }
                let report = BatchReport(batchID: batchID, items: batch.items)
                batch.items = []
                batch.report = report
                // What the batch's stream holds goes first; the end is handed over at once.
                batch.events?.release()
                batch.events?.continuation.yield(.finished(report))
                if let events = batch.events { aftermath.finishedStreams.append(events.continuation) }
                for waiter in batch.waiters { waiter.resume(returning: report) }
                batch.waiters = []
            }
        }

        private mutating func emitBatchProgress(_ batchID: BatchID, at now: ContinuousClock.Instant, force: Bool) {
            let interval = self.configuration.progressInterval
            let firstHeld = self.withBatch(batchID) { batch -> Bool in
                guard !batch.isFinished, batch.events != nil, batch.eventSelection.includesProgress else {
                    return false
                }
                guard force || (batch.lastProgressEvent.map { now - $0 >= interval } ?? true) else { return false }
                batch.lastProgressEvent = now
                let progress = BatchEvent.progressed(batch.tracker.snapshot(at: now))
                return batch.events!.send(progress, supersedes: true)
            }
            if firstHeld == true { self.holdsEvents(ofBatch: batchID) }
        }

        /// A batch's stream holds its first event: it is released with the others held, at the next release.
        private mutating func holdsEvents(ofBatch batchID: BatchID) {
            self.holdingBatches.append(batchID)
            self.scheduleRelease()
        }

        private mutating func scheduleRelease() {
            guard !self.isReleaseScheduled, let clock = self.eventClock else { return }
            self.isReleaseScheduled = true
            clock.schedule()
        }

        /// Hands every held event over to its stream (``Configuration/eventDeliveryInterval``).
        mutating func releaseHeldEvents() {
            self.isReleaseScheduled = false
            for batchID in self.holdingBatches { self.withBatch(batchID) { $0.events?.release() } }
            self.holdingBatches.removeAll(keepingCapacity: true)
            for key in self.holdingSubscribers {
                if let index = self.subscribers.index(forKey: key) { self.subscribers.values[index].release() }
            }
            self.holdingSubscribers.removeAll(keepingCapacity: true)
        }

        /// Changes a batch's record in place (a copy would duplicate its arrays on every change: O(n) per event).
        @discardableResult
        mutating func withBatch<T>(_ id: BatchID, _ body: (inout BatchRecord) -> T) -> T? {
            guard let index = self.batches.index(forKey: id) else { return nil }
            return body(&self.batches.values[index])
        }

        /// Changes a transfer's record in place: copying it out and back costs a retain and a release of each of
        /// its fields, several times per file on a list of small files.
        @discardableResult
        private mutating func withTransfer<T>(_ id: TransferID, _ body: (inout Record) -> T) -> T? {
            guard let index = self.transfers.index(forKey: id) else { return nil }
            return body(&self.transfers.values[index])
        }

        /// Sends a transfer's event to the manager's subscribers and observers and to the batches that wait for it.
        private mutating func emit(_ id: TransferID, _ kind: TransferEvent.Kind) {
            // Through the in-place accessor: only the three fields are copied, not the record.
            guard
                let (url, batches, attempts) = self.withTransfer(
                    id,
                    { ($0.request.url, $0.batches, $0.machine.attempts) }
                )
            else { return }
            if self.store != nil, let write = Self.operation(for: kind, attempts: attempts, id: id) {
                self.store?.enqueue(write)
            }
            // Made when someone takes it: a batch whose stream leaves transfer events out (the `haul` command's,
            // quiet) would have paid a copy of the URL and of the kind for each, and their release.
            var event: TransferEvent?
            if !self.subscribers.isEmpty || !self.observers.isEmpty {
                let made = TransferEvent(id: id, url: url, kind: kind)
                event = made
                for index in self.subscribers.indices where self.subscribers.values[index].send(made) {
                    self.holdingSubscribers.append(self.subscribers.keys[index])
                    self.scheduleRelease()
                }
                if !self.observers.isEmpty { self.observers.post(made) }
            }
            for batchID in batches {
                let firstHeld = self.withBatch(batchID) { batch -> Bool in
                    guard batch.events != nil, batch.eventSelection.includes(kind) else { return false }
                    let made = event ?? TransferEvent(id: id, url: url, kind: kind)
                    event = made
                    return batch.events?.send(.transfer(made)) == true
                }
                if firstHeld == true { self.holdsEvents(ofBatch: batchID) }
            }
        }
    }
}

extension TransferManager.Core {
    /// How often a running transfer's byte count is written to the store, at most. Half a second: a killed process
    /// under-reports at most that much, and the partial file, not this number, is the truth when resuming.
    static let checkpointInterval: Duration = .milliseconds(500)
    /// How often a running transfer's lease is renewed when its byte count does not change (a stall).
    static let leaseRenewalInterval: Duration = .seconds(10)

    /// The store operation for a transfer's event, if it has one.
    static func operation(for kind: TransferEvent.Kind, attempts: Int, id: TransferID) -> StoreOperation? {
        switch kind {
        case .queued: nil  // the row was just inserted as waiting (``StoreOperation/insert(_:)``)
        case .resumed: .state(id, .waiting, attempts: attempts)
        case .started: nil  // with the first checkpoint (``Record/unsavedStart``)
        case .paused: .state(id, .paused, attempts: attempts)
        case .retrying: .state(id, .waitingToRetry, attempts: attempts)
        case .progressed, .restarted: nil
        case .finished(.completed(let file)):
            // A download's completion was recorded before its rename (``StoreOperation/publishing``).
            file.isRecordedInStore ? nil : .completed(id, file, modified: file.modificationTime)
        case .finished(.failed(let error)): .failed(id, error, attempts: attempts)
        case .finished(.cancelled): .state(id, .cancelled, attempts: attempts)
        case .finished(.skipped): .state(id, .skipped, attempts: attempts)
        }
    }

    /// The operation that writes what the server said that lets a later attempt resume (and the file's size).
    static func validatorOperation(of record: TransferManager.Record, id: TransferID) -> StoreOperation {
        .validator(
            id,
            etag: record.validator?.etag,
            lastModified: record.validator?.lastModified,
            totalSize: record.expectedBytes
        )
    }

    /// The operation that inserts `record`'s row in `state` as item `position` of `batchID`, with the record's
    /// identifier as it is (not read again from the row's text).
    mutating func insert(
        _ record: TransferManager.Record,
        state: TransferState,
        as position: Int,
        of batchID: BatchID
    ) -> StoreOperation {
        let row = self.row(for: record, state: state)
        return .insert(InsertedRow(batchID: batchID, position: position, row: row, id: record.request.id))
    }

    /// The store's row for a record.
    mutating func row(for record: TransferManager.Record, state: TransferState) -> TransferRow {
        let secret = self.configuration.secretHeaderNames
        let headers = record.request.headers.filter { !secret.contains($0.name.lowercased()) }
        let kind = if case .file = record.request.destination { "file" } else { "folder" }
        let path = self.storedPaths.path(of: record.request.destination.url) { $0.standardizedFilePath }
        return TransferRow(
            id: record.request.id.rawValue,
            url: record.request.url.absoluteString,
            destinationKind: kind,
            destinationPath: path,
            folder: self.folderPaths.path(of: record.folder, Download.folderPath(of:)),
            nameComponents: JSONText.array(record.nameComponents),
            usesContentDisposition: record.usesContentDisposition,
            conflictPolicy: record.conflictPolicy.description,
            headers: JSONText.array(headers.map { JSONText.array([$0.name, $0.value]) }, elementsAreJSON: true),
            checksum: record.request.checksum?.description,
            expectedSize: record.request.expectedByteCount,
            computesSHA256: record.request.computesSHA256,
            state: state.description,
            bytesOnDisk: record.receivedBytes,
            totalSize: record.expectedBytes,
            etag: record.validator?.etag,
            lastModified: record.validator?.lastModified,
            attempts: 0,
            updatedAt: Date().timeIntervalSince1970,
            operation: record.request.isDownload
                ? StoredOperation.downloadJSON : Self.json(StoredOperation(record.request.operation))
        )
    }

    static func json<T: Encodable>(_ value: T) -> String {
        String(decoding: (try? JSONEncoder().encode(value)) ?? Data("[]".utf8), as: UTF8.self)
    }
}

extension TransferManager {
    /// The registered observers, indexed so that an event costs O(its observers), not O(all observers).
    struct Observers: Sendable {
        private var all: [Int: ObserverMailbox] = [:]
        private var byTransfer: [TransferID: [Int: ObserverMailbox]] = [:]

        var isEmpty: Bool { self.all.isEmpty && self.byTransfer.isEmpty }

        mutating func insert(_ mailbox: ObserverMailbox, forKey key: Int) {
            if let id = mailbox.transfer {
                self.byTransfer[id, default: [:]][key] = mailbox
            } else {
                self.all[key] = mailbox
            }
        }

        mutating func removeValue(forKey key: Int) -> ObserverMailbox? {
            if let mailbox = self.all.removeValue(forKey: key) { return mailbox }
            for (id, mailboxes) in self.byTransfer where mailboxes[key] != nil {
                let mailbox = self.byTransfer[id]![key]
                self.byTransfer[id]![key] = nil
                if self.byTransfer[id]!.isEmpty { self.byTransfer[id] = nil }
                return mailbox
            }
            return nil
        }

        /// Posts an event to its observers; those that end with their transfer are closed and forgotten.
        mutating func post(_ event: TransferEvent) {
            for mailbox in self.all.values { mailbox.post(event) }
            guard let mailboxes = self.byTransfer[event.id] else { return }
            for (key, mailbox) in mailboxes {
                mailbox.post(event)
                if case .finished = event.kind, mailbox.endsWhenFinished {
                    mailbox.close()
                    self.byTransfer[event.id]![key] = nil
                }
            }
            if self.byTransfer[event.id]?.isEmpty == true { self.byTransfer[event.id] = nil }
        }

        /// Closes every observer: the scope is ending.
        mutating func closeAll() {
            for mailbox in self.all.values { mailbox.close() }
            for mailboxes in self.byTransfer.values { for mailbox in mailboxes.values { mailbox.close() } }
            self.all = [:]
            self.byTransfer = [:]
        }
    }
}
