import Foundation

extension TransferManager {
    /// Everything the manager's lock protects (``LockedCore``).
    ///
    /// The lifecycle rules live in the pure ``Download/StateMachine`` and ``Scheduler/StateMachine``; the core applies
    /// their actions to the records and yields events (yielding to an `AsyncStream` only enqueues, so it is safe
    /// under the lock and keeps events in order). What it decides to record goes to ``storeOperations``, which the
    /// driver hands to the store's writer; what must happen after the lock (starting transfers, finishing streams,
    /// resuming waiters, removing files) goes to the ``Aftermath``.
    struct Core: Sendable {
        let configuration: Configuration
        /// Transfer tasks started and not yet ended; the manager's scope ends when it is 0 after the shutdown.
        var transferTasks = 0
        /// The scope's wait for the last transfer task once the manager has shut down.
        var endedWaiter: CheckedContinuation<Void, Never>?
        /// The time of the transition under way: the driver (``LockedCore``) reads the clock and sets it before each,
        /// so that the core itself never reads a clock.
        var now = ContinuousClock.now
        /// Whether the manager records its transfers in a store.
        let recordsToStore: Bool
        /// What to record in the store, in the order decided: the driver takes them before it releases the lock.
        var storeOperations: [StoreOperation] = []
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
            recordsToStore: Bool,
            eventClock: EventDeliveryClock? = nil
        ) {
            self.configuration = configuration
            self.eventClock = eventClock
            self.deliveries = deliveries
            self.recordsToStore = recordsToStore
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
        /// before they are added, rather than growing them a doubling at a time under the lock.
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
            let now = self.now
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
            // The host checked before the record is made, so the optional record is not copied to be checked.
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
                    self.record(.releaseLease(request.id, holder: holder))
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
                    self.record(.joinBatch(batchID: batchID, position: index, request.id))
                } else {
                    self.record(self.insert(record, state: .completed, as: index, of: batchID))
                    // Recorded in full: a file found through the publishing record of a killed process has no result
                    // yet.
                    self.record(.completed(request.id, completed, modified: completed.modificationTime))
                }
                self.batches[batchID]!.tracker.added(request.id, expectedBytes: completed.byteCount)
                self.settle(index: index, in: batchID, result: .completed(completed), at: now, aftermath: &aftermath)
                self.retire(request.id, result: .completed(completed))
                return
            }
            newRecord!.batches = [batchID]
            // Out of the optional before it is read, and moved into the table with `consume`, not copied.
            let record = newRecord.take()!
            if self.recordsToStore {
                if let persisted, isCompletedRow {
                    // Completed, but its file is gone or changed: downloaded again.
                    self.record(
                        .reopen(
                            request.id,
                            completedAt: persisted.row.updatedAt,
                            staleHolder: persisted.staleLeaseOwner
                        )
                    )
                }
                self.record(self.insert(record, state: .waiting, as: index, of: batchID))
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
        mutating func refuseDuplicate(
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
        mutating func join(
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

    }
}
