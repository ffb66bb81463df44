import Foundation

/// Progress, results and events: what the core tells batches, subscribers and observers.
extension TransferManager.Core {
    mutating func attemptStarted(_ id: TransferID, offset: Int64) {
        // An upload sends its body from the start again, but its progress never goes back.
        let now = self.now
        self.withTransfer(id) { record in
            if record.request.isDownload { record.receivedBytes = offset }
            record.unsavedStart = now
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
        let hasStore = self.recordsToStore
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
        if let validator { self.record(validator) }
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
        let hasStore = self.recordsToStore
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
        if !writes.isEmpty {
            self.storeOperations.append(contentsOf: writes)
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
    static func progressed(
        _ record: inout TransferManager.Record,
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
    mutating func finish(
        _ id: TransferID,
        result: TransferResult,
        at now: ContinuousClock.Instant,
        aftermath: inout TransferManager.Aftermath
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
    mutating func retire(_ id: TransferID, result: TransferResult) {
        // Read in place, then removed: taken out whole, the record was copied, and released twice.
        guard let index = self.transfers.index(forKey: id) else { return }
        self.finished[id] = self.withTransfer(id) { TransferManager.FinishedRecord.of($0, result: result) }
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

    /// Whether this manager has met each of `requests` (``knows(_:)-(TransferID)``): a method of its own, so the core is
    /// not copied for each identifier.
    func knows(_ requests: [TransferRequest]) -> [Bool] {
        requests.indices.map { self.knows(requests[$0].id) }
    }

    /// Whether this manager knows the identifier.
    func knows(_ id: TransferID) -> Bool {
        // By index: `transfers[id] != nil` would copy the record out.
        self.transfers.index(forKey: id) != nil || self.finished.index(forKey: id) != nil
    }

    /// Gives a transfer its result in one batch, and ends the batch when that was its last transfer.
    mutating func settle(
        _ id: TransferID,
        in batchID: BatchID,
        result: TransferResult,
        at now: ContinuousClock.Instant,
        aftermath: inout TransferManager.Aftermath,
        emitted: Bool = false
    ) {
        guard let indices = self.withBatch(batchID, { $0.pending.removeValue(forKey: id) }) ?? nil else { return }
        for index in indices {
            self.settle(index: index, in: batchID, result: result, at: now, aftermath: &aftermath, emitted: emitted)
        }
    }

    /// Gives the item at `index` of a batch its result.
    mutating func settle(
        index: Int,
        in batchID: BatchID,
        result: TransferResult,
        at now: ContinuousClock.Instant,
        aftermath: inout TransferManager.Aftermath,
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
            aftermath.roomWaiters += batch.takeRoomWaitersWithinLimit()
            batch.tracker.added(id, expectedBytes: byteCount)
            batch.tracker.finished(id, state: result.state, byteCount: byteCount)
            return firstHeld
        }
        if firstHeld == true { self.holdsEvents(ofBatch: batchID) }
        self.emitBatchProgress(batchID, at: now, force: true)
        self.finishIfDone(batchID, aftermath: &aftermath)
    }

    mutating func finishIfDone(_ batchID: BatchID, aftermath: inout TransferManager.Aftermath) {
        self.withBatch(batchID) { batch in
            guard batch.isSealed, !batch.isFinished, batch.finishedCount == batch.settled.count else { return }
            let report = BatchReport(batchID: batchID, items: batch.items)
            batch.items = []
            batch.report = report
            // What the batch's stream holds goes first; the end is handed over at once.
            batch.events?.release()
            batch.events?.continuation.yield(.finished(report))
            if let events = batch.events { aftermath.finishedStreams.append(events.continuation) }
            aftermath.reports += batch.waiters.map { ($0, report) }
            batch.waiters = []
        }
    }

    mutating func emitBatchProgress(_ batchID: BatchID, at now: ContinuousClock.Instant, force: Bool) {
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
    mutating func holdsEvents(ofBatch batchID: BatchID) {
        self.holdingBatches.append(batchID)
        self.scheduleRelease()
    }

    mutating func scheduleRelease() {
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
    mutating func withBatch<T>(_ id: BatchID, _ body: (inout TransferManager.BatchRecord) -> T) -> T? {
        guard let index = self.batches.index(forKey: id) else { return nil }
        return body(&self.batches.values[index])
    }

    /// Changes a transfer's record in place: copying it out and back costs a retain and a release of each of
    /// its fields, several times per file on a list of small files.
    @discardableResult
    mutating func withTransfer<T>(_ id: TransferID, _ body: (inout TransferManager.Record) -> T) -> T? {
        guard let index = self.transfers.index(forKey: id) else { return nil }
        return body(&self.transfers.values[index])
    }

    /// Sends a transfer's event to the manager's subscribers and observers and to the batches that wait for it.
    mutating func emit(_ id: TransferID, _ kind: TransferEvent.Kind) {
        // Through the in-place accessor: only the three fields are copied, not the record.
        guard
            let (url, batches, attempts) = self.withTransfer(
                id,
                { ($0.request.url, $0.batches, $0.machine.attempts) }
            )
        else { return }
        if self.recordsToStore, let write = Self.operation(for: kind, attempts: attempts, id: id) {
            self.record(write)
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
