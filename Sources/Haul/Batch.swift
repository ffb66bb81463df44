/// A group of transfers submitted together, with one report at the end.
///
/// Its events (``events``) and its ``report()`` cover every transfer in it, including those that joined a transfer
/// another batch had already queued.
public final class Batch: Sendable {
    /// The batch's identifier within its manager.
    public let id: BatchID
    private let manager: TransferManager

    init(id: BatchID, manager: TransferManager) {
        self.id = id
        self.manager = manager
    }

    /// Adds a transfer to the batch while it runs.
    ///
    /// - Throws: ``HaulError/Code/batchFinished`` when every transfer of the batch has already finished.
    public func add(_ request: TransferRequest) throws {
        try self.add(contentsOf: [request])
    }

    /// Adds transfers to the batch while it runs, in order, as ``add(_:)`` adds each, with one look into the store
    /// and one turn of the manager's lock for all of them: a producer with many (a list read from a file) adds them
    /// in slices rather than one lock and one look per request, while the running transfers take the same lock.
    ///
    /// - Throws: ``HaulError/Code/batchFinished`` when every transfer of the batch has already finished, or
    ///   ``HaulError/Code/managerShutDown``; then none of `requests` was added.
    public func add(contentsOf requests: [TransferRequest]) throws {
        guard !requests.isEmpty else { return }
        let id = self.id
        let persisted = self.manager.lookUp(requests)
        try self.manager.withCore { core, aftermath throws(HaulError) in
            guard !core.isShutDown else { throw HaulError(.managerShutDown, "The transfer manager has shut down") }
            // A batch ``TransferManager/stopAll()`` ended takes nothing more, though files it waits for are still
            // being published.
            guard core.withBatch(id, { $0.isFinished || $0.isStopped }) == false else {
                throw HaulError(.batchFinished, "Batch \(id) has finished; start a new batch")
            }
            core.reserveCapacity(forMoreTransfers: requests.count)
            for (request, persisted) in zip(requests, persisted) {
                core.add(request, to: id, persisted: persisted, aftermath: &aftermath)
            }
        }
    }

    /// How many of the batch's items have no result yet (waiting, running, paused or waiting to retry).
    public var unfinishedCount: Int {
        let id = self.id
        return self.manager.core.withLockedValue { core in core.withBatch(id) { $0.unfinishedCount } ?? 0 }
    }

    /// Waits until at most `count` of the batch's items are unfinished: a producer adding a long list a window at a
    /// time keeps the queue, and the memory it takes, bounded (`haul get -i` keeps at most 4,096 queued). Returns at
    /// once when that is already so. Cancelling the waiting task does not end the wait early; stopping or cancelling
    /// the batch does.
    public func waitUntilUnfinished(atMost count: Int) async {
        let id = self.id
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.manager.core.withLockedValue { core in
                let waits = core.withBatch(id) { batch in
                    guard batch.unfinishedCount > count else { return false }
                    batch.roomWaiters.append((count, continuation))
                    return true
                }
                if waits != true { continuation.resume() }
            }
        }
    }

    /// Tells the batch how many items it will have in all, when they are added over time (a long list fed a window
    /// at a time): until they are added, its progress counts the missing ones as files of unknown size, so the
    /// file count and the fraction are right from the start. The report's storage is made that size at once, and the
    /// manager's tables room for as many transfers (up to 4,096: a longer list is fed a window at a time).
    public func expectItems(_ count: Int) {
        let id = self.id
        self.manager.core.withLockedValue { core in
            guard core.batches[id] != nil else { return }
            core.batches[id]!.tracker.expect(itemCount: count)
            core.batches[id]!.items.reserveCapacity(count)
            core.batches[id]!.settled.reserveCapacity(count)
            core.reserveCapacity(forMoreTransfers: count)
            // Sized once: growing doubles it near the end of a long list, old and new table at once (6 MiB more at
            // the peak of 100,000 URLs).
            core.finished.reserveCapacity(core.finished.count + count)
        }
    }

    /// Says that no more transfers will be added: the batch finishes once those in it have. Batches from
    /// ``TransferManager/enqueue(_:)-([TransferRequest])`` are sealed from the start.
    public func seal() {
        self.seal(recordingListComplete: true)
    }

    /// ``seal()``; without `recordingListComplete`, the store's record of whether the batch's list was added to its
    /// end stays as it is (a stored batch resumed: only what its first process recorded is added again).
    func seal(recordingListComplete: Bool) {
        let id = self.id
        self.manager.withCore { core, aftermath in
            guard core.batches[id]?.isSealed == false else { return }
            core.batches[id]!.isSealed = true
            // Not after a stop ended the batch (it sealed it then): the list was not added to its end.
            if recordingListComplete { core.record(.listComplete(id)) }
            core.finishIfDone(id, aftermath: &aftermath)
        }
    }

    /// The batch's events from the first time this property is read: the transfers' events, coalesced progress,
    /// and a last ``BatchEvent/finished(_:)``; then the stream ends. Every read returns the same stream, which one
    /// task iterates. A batch that already finished gives a stream of its final event. The same as
    /// `events(.all)`. Transfers start as soon as they are added: ask for the events before adding them (see
    /// ``TransferManager/makeBatch()``) to see each from its `queued` event.
    public var events: AsyncStream<BatchEvent> { self.events(.all) }

    /// The batch's events that `selection` names, from the first time the batch's events are asked for, and a last
    /// ``BatchEvent/finished(_:)``; then the stream ends.
    ///
    /// A batch has one event stream, which one task iterates: the first call (or read of ``events``) makes it with
    /// its selection, and every later one returns that stream, whatever it asks for. A batch that already finished
    /// gives a stream of its final event.
    public func events(_ selection: BatchEvent.Selection) -> AsyncStream<BatchEvent> {
        let id = self.id
        return self.manager.withCore { core, aftermath in
            if let stream = core.batches[id]?.eventStream { return stream }
            let (stream, continuation) = AsyncStream<BatchEvent>.makeStream()
            if let report = core.batches[id]?.report {
                continuation.yield(.finished(report))
                aftermath.finishedStreams.append(continuation)
            } else {
                let outlet = EventOutlet(continuation, holds: core.eventClock != nil)
                core.batches[id]?.events = outlet
                core.batches[id]?.eventSelection = selection
            }
            core.batches[id]?.eventStream = stream
            return stream
        }
    }

    /// Waits until every transfer of the batch has finished and returns the report. Cancelling the waiting task
    /// does not cancel the batch (call ``cancel()`` for that).
    public func report() async -> BatchReport {
        let id = self.id
        return await withCheckedContinuation { continuation in
            self.manager.withCore { core, _ in
                if let report = core.batches[id]?.report {
                    continuation.resume(returning: report)
                } else {
                    core.batches[id]?.waiters.append(continuation)
                }
            }
        }
    }

    /// The batch's progress now.
    public var progress: BatchProgress {
        let id = self.id
        return self.manager.core.withLockedValue { core in core.batches[id]!.tracker.snapshot(at: .now) }
    }

    /// Pauses every unfinished transfer of the batch.
    public func pause() { self.forEachTransfer { $0.pause($1, aftermath: &$2) } }

    /// Resumes every paused transfer of the batch.
    public func resume() { self.forEachTransfer { $0.resume($1, aftermath: &$2) } }

    /// Gives every unfinished transfer of the batch this priority (see ``TransferManager/setPriority(_:of:)``): a batch
    /// the user is looking at can jump ahead of a background one.
    public func setPriority(_ priority: Int) {
        self.forEachTransfer { core, id, _ in core.setPriority(priority, of: id) }
    }

    /// Cancels the batch: its unfinished transfers are reported cancelled. Safe to call from inside an event loop
    /// over ``events`` (SDL-0029's "cancel the rest" from the progress callback).
    public func cancel() {
        let id = self.id
        self.manager.withCore { $0.cancel(batch: id, aftermath: &$1) }
    }

    private func forEachTransfer(
        _ body: (inout TransferManager.Core, TransferID, inout TransferManager.Aftermath) -> Void
    ) {
        let id = self.id
        self.manager.withCore { core, aftermath in
            guard let batch = core.batches[id] else { return }
            for transferID in batch.pending.keys { body(&core, transferID, &aftermath) }
        }
    }
}
