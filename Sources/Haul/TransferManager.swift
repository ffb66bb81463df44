import AsyncHTTPClient
import CHaulSystem
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Tracing

/// Runs batches of downloads concurrently under a global and a per-host limit, streaming each file to disk.
///
/// A manager lives for the scope of ``withTransferManager(configuration:_:)``: its transfers run while the closure
/// runs, and whatever is still running when it returns is cancelled, so nothing outlives the scope.
///
/// ```swift
/// let report = try await TransferManager.withTransferManager { manager in
///     try await manager.enqueue(urls.map { TransferRequest(url: $0, into: folder) }).report()
/// }
/// for (item, error) in report.failed { print(item.url, error.message) }
/// ```
public final class TransferManager: Sendable {
    /// How this manager runs its transfers.
    public let configuration: Configuration
    let transport: HTTPTransport
    /// The manager's state, behind its lock.
    let core: LockedCore
    let storeWriter: StoreWriter?
    /// The renames of finished files when there is no store, one at a time (with a store, its commits hand them
    /// over one at a time: ``StoreWriter``).
    let renames = OneAtATime()
    /// What each transfer task runs with, as the manager's scope had it: its priority and its tracing context.
    private let scopePriority: TaskPriority
    private let scopeContext: ServiceContext?
    private let deliveries: AsyncStream<ObserverMailbox>
    /// What this manager knows of the transfers its store holds (see ``lookUp(_:)``).
    private let storedIDs = NIOLockedValueBox(StoredIDs.unknown)

    /// Fired when the scope ends, so the progress ticker stops at once instead of finishing its interval.
    private let tickerStop = StopSignal()

    private init(configuration: Configuration, client: HTTPClient, proxiedClients: [Proxy: HTTPClient]) {
        self.configuration = configuration
        self.transport = HTTPTransport(client: client, proxiedClients: proxiedClients, configuration: configuration)
        self.scopePriority = Task.currentPriority
        self.scopeContext = ServiceContext.current
        let (deliveries, deliveryContinuation) = AsyncStream<ObserverMailbox>.makeStream()
        self.deliveries = deliveries
        self.storeWriter = configuration.store.map {
            StoreWriter(store: $0, publishingLinger: configuration.publishingLinger)
        }
        let eventClock =
            configuration.eventDeliveryInterval > .zero
            ? EventDeliveryClock(interval: configuration.eventDeliveryInterval, group: client.eventLoopGroup) : nil
        self.core = LockedCore(
            Core(
                configuration: configuration,
                deliveries: deliveryContinuation,
                recordsToStore: self.storeWriter != nil,
                eventClock: eventClock
            ),
            store: self.storeWriter
        )
        eventClock?.connect { [weak self] in self?.core.withLockedValue { $0.releaseHeldEvents() } }
    }

    /// Creates a manager, runs `body` with it, then cancels what is left and releases every resource.
    ///
    /// - Throws: what `body` throws, or ``HaulError/Code/invalidRequest`` for an invalid configuration (limits
    ///   below 1, a file of trusted certificates that holds none).
    public static func withTransferManager<Result>(
        configuration: Configuration = Configuration(),
        _ body: (TransferManager) async throws -> Result
    ) async throws -> Result {
        guard configuration.maximumConcurrentTransfers > 0, configuration.maximumTransfersPerHost > 0 else {
            throw HaulError(.invalidRequest, "The concurrency limits must be at least 1")
        }
        let (client, proxiedClients) = try HTTPTransport.makeClients(configuration)
        let manager = TransferManager(configuration: configuration, client: client, proxiedClients: proxiedClients)
        let result: Swift.Result<Result, any Error>
        do {
            result = try await withThrowingTaskGroup(of: Void.self, returning: Swift.Result<Result, any Error>.self) {
                group in
                group.addTask { await manager.waitForTransfersToEnd() }
                group.addTask { await manager.deliverObservedEvents(manager.deliveries) }
                group.addTask { await manager.sampleProgress() }
                let outcome: Swift.Result<Result, any Error>
                do {
                    outcome = .success(try await body(manager))
                } catch {
                    outcome = .failure(error)
                }
                manager.shutDown()
                try await group.waitForAll()
                manager.storeWriter?.flush()
                manager.storeWriter?.retire()
                return outcome
            }
        } catch {
            result = .failure(error)
        }
        try? await manager.transport.shutDown()
        return try result.get()
    }

    /// Waits until the manager has shut down and its last transfer task has ended, then ends the event streams.
    /// Cancelling the scope's task shuts the manager down (its transfers stop as when the scope ends).
    private func waitForTransfersToEnd() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                self.withCore { core, aftermath in
                    core.endedWaiter = continuation
                    core.endWaitIfTransfersEnded(aftermath: &aftermath)
                }
            }
        } onCancel: {
            self.shutDown()
        }
        // Every transfer has ended and emitted its last event: the streams and observers end after what they hold.
        let subscribers = self.core.withLockedValue { core in
            core.releaseHeldEvents()
            defer {
                for subscriber in core.activitySubscribers.values { subscriber.finish() }
                core.activitySubscribers = [:]
                core.subscribers = [:]
                core.observers.closeAll()
                core.deliveries.finish()
            }
            return core.subscribers.values.map(\.continuation)
        }
        for subscriber in subscribers { subscriber.finish() }
    }

    /// Samples the running attempts' progress every progress interval until the manager shuts down.
    private func sampleProgress() async {
        let interval = max(self.configuration.progressInterval, .milliseconds(1))
        while true {
            await self.tickerStop.wait(upTo: interval)
            let isShutDown = self.core.withLockedValue { core in
                core.sampleProgress(at: .now)
                return core.isShutDown
            }
            self.storeWriter?.flushInBackground()
            if isShutDown { return }
        }
    }

    /// Runs a transfer the scheduler started in a task of its own, which its stop signal cancels.
    ///
    /// A task per transfer, made as the scheduler starts it. Handing each start through a stream to a loop that made
    /// a child task (a wake-up under the lock, then the task), and waiting for the stop signal in a second task beside
    /// the attempt, cost about 10 % of the CPU on 2,000 small files. The task runs at the priority, and with the
    /// tracing context, of the manager's scope; the scope waits for it (``waitForTransfersToEnd()``).
    ///
    /// The task runs on one of the HTTP client's event loops (``EventLoopExecutor``): the one the starting thread
    /// runs, when it is one (a transfer that ended starts the next on its loop), else the group's next. Its request
    /// then prefers a connection on that loop, and each resumption after a response's head or end is a job queued on
    /// the same thread instead of a wake-up of another.
    private func spawnTransfer(_ id: TransferID, signal: StopSignal) {
        let context = self.scopeContext
        let operation: @Sendable () async -> Void = {
            if let context {
                await ServiceContext.withValue(context) { await self.runTransfer(id, signal: signal) }
            } else {
                await self.runTransfer(id, signal: signal)
            }
        }
        let task: Task<Void, Never>
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *) {
            let executor = EventLoopExecutor(self.transport.client.eventLoopGroup.any())
            task = Task.detached(executorPreference: executor, priority: self.scopePriority, operation: operation)
        } else {
            task = Task.detached(priority: self.scopePriority, operation: operation)
        }
        signal.cancelOnFire(task)
    }

    /// Runs a transfer's attempt and any wait for a retry; its last change under the lock also counts its task out.
    ///
    /// A download with a file to publish hands it over and its task ends: the publishing goes on from the store's
    /// commit (``Download/publish(_:observer:isStopped:completion:)``), and counts as the transfer's task until its
    /// outcome is in.
    nonisolated(nonsending) private func runTransfer(_ id: TransferID, signal: StopSignal) async {
        defer { signal.taskEnded() }
        guard let plan = self.core.withLockedValue({ $0.plan(for: id) }) else {
            self.withCore { $0.transferTaskEnded(aftermath: &$1) }
            return
        }
        switch await self.claimAndRun(plan) {
        case .outcome(let outcome):
            guard let wait = self.attemptEnded(id, outcome: outcome) else { return }
            await self.waitForRetry(id, wait)
        case .publication(let publication):
            Download.publish(publication, observer: self, isStopped: { signal.isFired }) { outcome in
                guard let wait = self.attemptEnded(id, outcome: outcome) else { return }
                // A failed rename to retry after a delay: the wait needs a task again.
                Task.detached(priority: self.scopePriority) { await self.waitForRetry(id, wait) }
            }
        }
    }

    /// Applies an attempt's outcome; counts the transfer's task out unless a retry is to be waited for.
    private func attemptEnded(_ id: TransferID, outcome: Download.AttemptOutcome) -> RetryWait? {
        self.withCore { core, aftermath in
            let wait = core.attemptEnded(id, outcome: outcome, jitter: .random(in: 0...1), aftermath: &aftermath)
            if wait == nil { core.transferTaskEnded(aftermath: &aftermath) }
            return wait
        }
    }

    /// Waits before a retry (or until the wait is stopped), then queues the transfer again and counts its task out.
    private func waitForRetry(_ id: TransferID, _ wait: RetryWait) async {
        await wait.signal.wait(upTo: wait.delay)
        self.withCore { core, aftermath in
            core.retryWaitEnded(id, wait, aftermath: &aftermath)
            core.transferTaskEnded(aftermath: &aftermath)
        }
    }

    /// With a store, claims the transfer's lease first (another process may hold it, or have completed the file);
    /// then runs the attempt.
    nonisolated(nonsending) private func claimAndRun(_ plan: Download.Plan) async -> Download.Ending {
        switch await self.storeWriter?.claim(plan.id) ?? .claimed {
        case .claimed:
            break
        case .heldElsewhere:
            return .outcome(
                .failed(
                    HaulError(
                        .leasedElsewhere,
                        "Another haul process sharing the state database is working on this transfer"
                    )
                )
            )
        case .completedElsewhere(let file):
            return .outcome(.completed(file))
        }
        switch plan.operation {
        case .download: return await Download.run(plan, transport: self.transport, observer: self)
        case .upload(let upload):
            return .outcome(await Upload.run(plan, upload, transport: self.transport, observer: self))
        case .delete(let deletion):
            return .outcome(await Deletion.run(plan, deletion, transport: self.transport, observer: self))
        }
    }

    private func shutDown() {
        self.withCore { $0.shutDown(aftermath: &$1) }
        self.tickerStop.fire()
    }

    /// Changes the state under the lock, then performs what must happen outside it.
    @discardableResult
    func withCore<T, E: Error>(_ body: (inout Core, inout Aftermath) throws(E) -> T) throws(E) -> T {
        let (result, aftermath) = self.core.withLockedValue { core -> (Result<T, E>, Aftermath) in
            var aftermath = Aftermath()
            do throws(E) {
                return (.success(try body(&core, &aftermath)), aftermath)
            } catch {
                return (.failure(error), aftermath)
            }
        }
        aftermath.perform()
        // The transfers it started, each in a task of its own.
        for start in aftermath.starts { self.spawnTransfer(start.id, signal: start.signal) }
        return try result.get()
    }

    // MARK: Submitting

    /// Submits requests as one batch; they start as the limits allow. An empty list gives a batch that is already
    /// finished, with an empty report.
    ///
    /// A request whose identifier names a transfer that is queued, running or completed joins it: both batches see
    /// its events and its result. A request that cannot be carried out (an `ftp:` URL, an identifier already used for
    /// another URL) fails on its own; the rest of the batch goes on.
    ///
    /// The transfers start at once, on the HTTP client's threads, and a batch's ``Batch/events`` begin when first
    /// asked for: ask for them right after this returns, or, to be sure to see every event whatever the machine's
    /// load, make the batch with ``makeBatch()``, ask for its events, then add the requests and seal it.
    ///
    /// - Throws: ``HaulError/Code/managerShutDown`` after the manager's scope has ended.
    @discardableResult
    public func enqueue(_ requests: [TransferRequest]) throws -> Batch {
        let storedID = try self.createStoredBatch()
        let persisted = self.lookUp(requests)
        let id = try self.withCore { core, aftermath throws(HaulError) -> BatchID in
            guard !core.isShutDown else { throw HaulError(.managerShutDown, "The transfer manager has shut down") }
            // Sealed only once every request is in: an item that settles at once must not end the batch early.
            let id = core.makeBatch(sealed: false, storedID: storedID)
            for (request, persisted) in zip(requests, persisted) {
                core.add(request, to: id, persisted: persisted, aftermath: &aftermath)
            }
            core.batches[id]!.isSealed = true
            core.finishIfDone(id, aftermath: &aftermath)
            return id
        }
        return Batch(id: id, manager: self)
    }

    /// Continues a batch the store knows (from an earlier process): its transfers are submitted again under the
    /// same batch; completed files that are unchanged are not fetched, partial files resume.
    ///
    /// `headers` are added to every request, each replacing a stored header of the same name (case-insensitively):
    /// the store never keeps `Authorization`, `Cookie` or `Proxy-Authorization`, so a batch that needed one needs it
    /// given again.
    ///
    /// `events`, when given, is the selection of the batch's ``Batch/events(_:)``, asked for before the first transfer
    /// is added: the batch's transfers start as they are added, and without it the first ones may have started, or
    /// ended, before the caller can ask.
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` when the manager has no store or the store does not know the batch.
    public func resumeStoredBatch(
        _ id: BatchID,
        headers: [(name: String, value: String)] = [],
        events: BatchEvent.Selection? = nil
    ) throws -> Batch {
        guard let store = self.configuration.store else {
            throw HaulError(.invalidRequest, "This manager has no store to resume batch \(id) from")
        }
        let rows: [TransferRow]
        do {
            rows = try store.rows(inBatch: id)
        } catch {
            throw HaulError(.fileSystem, "Cannot read the store", underlying: error)
        }
        guard !rows.isEmpty else { throw HaulError(.invalidRequest, "The store has no batch \(id)") }
        var requests = rows.compactMap(\.request)
        if !headers.isEmpty {
            let given = Set(headers.map { $0.name.lowercased() })
            for index in requests.indices {
                requests[index].headers.removeAll { given.contains($0.name.lowercased()) }
                requests[index].headers += headers
            }
        }
        // Added a slice at a time, as `haul get -i` adds a list: the first transfers start after the first slice's
        // look-up in the store, not after every row's.
        let batch = try self.makeBatch(storedID: id)
        if let events { _ = batch.events(events) }
        batch.expectItems(requests.count)
        for start in stride(from: 0, to: requests.count, by: Self.resumedSlice) {
            try batch.add(contentsOf: Array(requests[start..<min(start + Self.resumedSlice, requests.count)]))
        }
        batch.seal(recordingListComplete: false)
        return batch
    }

    /// How many of a resumed batch's requests are added at a time.
    static let resumedSlice = 128

    /// The store's identifier for a new batch, when the manager has a store.
    private func createStoredBatch(listComplete: Bool = true) throws(HaulError) -> BatchID? {
        guard let store = self.configuration.store else { return nil }
        do {
            return try store.createBatch(listComplete: listComplete)
        } catch {
            throw HaulError(.fileSystem, "Cannot record the batch in the store", underlying: error)
        }
    }

    /// What the store knows of each request, read before the lock: the rows of those it may hold, in one read, and a
    /// `stat` or two for each of them.
    ///
    /// A store just created holds no transfers: nothing is read on the way to the first request. Otherwise each
    /// request's row is looked for until as many requests have been as the store held rows; then the store's
    /// identifiers are read once, and a request that neither the store knew then nor this manager has met costs no
    /// database read (most of a long list). A row another process adds after they are read is not looked up; that
    /// process's lease keeps the two from downloading the same file at once, and its completion is found at the claim.
    func lookUp(_ requests: [TransferRequest]) -> [Persisted?] {
        guard let store = self.configuration.store else { return Array(repeating: nil, count: requests.count) }
        let known = self.storedIDs.withLockedValue { ids in
            ids.digests(
                for: requests.count,
                holdsNoTransfers: store.holdsNoTransfers,
                rowsAtMost: { (try? store.rowsAtMost()) ?? 0 },
                read: { (try? store.transferIDDigests()) ?? TransferIDDigests() }
            )
        }
        // Transfers this manager has met since (a failed one submitted again) are in the store through it.
        let met = self.core.withLockedValue { $0.knows(requests) }
        let stored = requests.indices.filter { met[$0] || known?.mayContain(requests[$0].id) ?? true }
        var persisted = [Persisted?](repeating: nil, count: requests.count)
        guard !stored.isEmpty else { return persisted }
        for (index, found) in zip(stored, Persisted.lookUp(stored.map { requests[$0] }, in: store)) {
            persisted[index] = found
        }
        return persisted
    }

    /// The last error writing to the store, if any: the transfers go on without it, so check it after a batch.
    public var storeError: (any Error)? { self.storeWriter?.lastError }

    /// Submits one request as a batch of its own.
    @discardableResult
    public func enqueue(_ request: TransferRequest) throws -> Batch {
        try self.enqueue([request])
    }

    /// Creates an empty, open batch to add transfers to one at a time (from a stream of input, say). It finishes
    /// once ``Batch/seal()`` has been called and every transfer in it has finished.
    ///
    /// With a store, the batch is recorded as open until it is sealed: a process that stops before sealing it leaves
    /// a batch the store knows only in part (``StoredBatch/isListComplete``).
    public func makeBatch() throws -> Batch {
        try self.makeBatch(storedID: try self.createStoredBatch(listComplete: false))
    }

    /// An open batch, recorded in the store as `storedID` (a new batch's, or a resumed one's).
    private func makeBatch(storedID: BatchID?) throws -> Batch {
        let id = try self.withCore { core, _ throws(HaulError) -> BatchID in
            guard !core.isShutDown else { throw HaulError(.managerShutDown, "The transfer manager has shut down") }
            return core.makeBatch(sealed: false, storedID: storedID)
        }
        return Batch(id: id, manager: self)
    }

    /// Downloads URLs into a folder as one batch and returns its report.
    public func download(_ urls: [URL], into folder: URL) async throws -> BatchReport {
        try await self.enqueue(urls.map { TransferRequest(url: $0, into: folder) }).report()
    }

    // MARK: Control

    /// Pauses a transfer: a waiting one leaves the queue, a running one stops and keeps its partial file.
    public func pause(_ id: TransferID) { self.withCore { $0.pause(id, aftermath: &$1) } }

    /// Resumes a paused transfer: it queues again and continues from its partial file with a `Range` request.
    public func resume(_ id: TransferID) { self.withCore { $0.resume(id, aftermath: &$1) } }

    /// Sets, changes or (with `nil`) removes one transfer's own bandwidth limit, on top of the manager's; it takes
    /// effect at the next chunk.
    public func setBandwidthLimit(_ bytesPerSecond: Int64?, of id: TransferID) {
        self.core.withLockedValue { $0.setBandwidthLimit(bytesPerSecond, of: id) }
    }

    /// Changes a transfer's priority: a waiting transfer moves in the queue at once (higher starts first); a running
    /// one keeps running, and the priority applies when it queues again (a retry, a resume).
    public func setPriority(_ priority: Int, of id: TransferID) {
        self.core.withLockedValue { $0.setPriority(priority, of: id) }
    }

    /// Cancels a transfer; its partial file is removed and it reports ``TransferResult/cancelled``.
    public func cancel(_ id: TransferID) { self.withCore { $0.cancel(id, aftermath: &$1) } }

    /// Pauses every unfinished transfer.
    public func pauseAll() {
        self.withCore { core, aftermath in
            for id in Array(core.transfers.keys) { core.pause(id, aftermath: &aftermath) }
        }
    }

    /// Resumes every paused transfer.
    public func resumeAll() {
        self.withCore { core, aftermath in
            for id in Array(core.transfers.keys) { core.resume(id, aftermath: &aftermath) }
        }
    }

    /// Sets, changes or (with `nil`) removes the bandwidth limit over all transfers, taking effect at once.
    public func setBandwidthLimit(_ bytesPerSecond: Int64?) {
        self.core.withLockedValue { $0.bandwidth }.setLimit(bytesPerSecond)
    }

    /// Stops every transfer, keeping partial files (and, with a store, the record to resume them), and ends every
    /// batch with its unfinished transfers reported as cancelled: what a command does on Ctrl-C. A file whose body
    /// had arrived and which was being published ends with its own result (completed, as a rule).
    public func stopAll() {
        self.withCore { $0.stopAll(aftermath: &$1) }
        // The files being published end with their own results, which their batches wait for: their records need
        // not wait for others to share their commit.
        self.storeWriter?.flushPromptly()
    }

    /// Cancels every unfinished transfer of every batch.
    public func cancelAll() {
        self.withCore { core, aftermath in
            for id in Array(core.transfers.keys) { core.cancel(id, aftermath: &aftermath) }
        }
    }

    // MARK: Observing

    /// The state of a transfer, or `nil` if neither the manager nor its store knows the identifier.
    ///
    /// A transfer of an earlier process that this manager has not been given again is answered from the store, as
    /// it was last recorded (a transfer that was running when its process died reads `running` until it is
    /// submitted again).
    public func state(of id: TransferID) -> TransferState? {
        if let state = self.core.withLockedValue({ $0.state(of: id) }) { return state }
        return self.stored(id).flatMap { TransferState(name: $0.state) }
    }

    /// The progress of a transfer, or `nil` if neither the manager nor its store knows the identifier (from the
    /// store: the bytes at the last checkpoint, and no speed).
    public func progress(of id: TransferID) -> TransferProgress? {
        if let progress = self.core.withLockedValue({ $0.progress(of: id) }) { return progress }
        return self.stored(id).map {
            TransferProgress(receivedBytes: $0.bytesOnDisk, expectedBytes: $0.totalBytes, bytesPerSecond: 0)
        }
    }

    private func stored(_ id: TransferID) -> StoredTransfer? {
        (try? self.configuration.store?.transfer(id)) ?? nil
    }

    /// A stream of ``runningTransferCount`` (HWIFileDownload's network-activity count, for a spinner): its value
    /// now, then each new value as it changes, until the manager's scope ends.
    public func runningTransferCounts() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let subscribed = self.core.withLockedValue { core -> Bool in
            guard !core.isShutDown else { return false }
            let key = core.nextSubscriberID
            core.nextSubscriberID += 1
            core.activitySubscribers[key] = continuation
            continuation.yield(core.scheduler.slotsInUse)
            continuation.onTermination = { [weak self] _ in
                _ = self?.core.withLockedValue { $0.activitySubscribers.removeValue(forKey: key) }
            }
            return true
        }
        if !subscribed { continuation.finish() }
        return stream
    }

    /// The result of a finished transfer; `nil` while it runs or if the identifier is unknown.
    public func result(of id: TransferID) -> TransferResult? {
        self.core.withLockedValue { $0.finished[id]?.result }
    }

    /// Whether any transfer is waiting or running.
    public var isActive: Bool {
        self.core.withLockedValue { $0.scheduler.runningCount + $0.scheduler.waitingCount > 0 }
    }

    /// The number of transfers with a request in flight (HWIFileDownload's network-activity count): a download
    /// that is renaming its arrived file no longer counts, as it no longer counts against the limits.
    public var runningTransferCount: Int {
        self.core.withLockedValue { $0.scheduler.slotsInUse }
    }

    /// A new stream of every transfer event of this manager, from now until the manager's scope ends.
    ///
    /// Each call makes an independent subscription; stop iterating (or drop the stream) to unsubscribe.
    public func events() -> AsyncStream<TransferEvent> {
        let (stream, continuation) = AsyncStream<TransferEvent>.makeStream()
        let subscribed = self.core.withLockedValue { core -> Bool in
            guard !core.isShutDown else { return false }
            let key = core.nextSubscriberID
            core.nextSubscriberID += 1
            core.subscribers[key] = EventOutlet(continuation, holds: core.eventClock != nil)
            continuation.onTermination = { [weak self] _ in
                _ = self?.core.withLockedValue { $0.subscribers.removeValue(forKey: key) }
            }
            return true
        }
        if !subscribed { continuation.finish() }
        return stream
    }
}
