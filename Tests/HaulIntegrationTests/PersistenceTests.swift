import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Surviving a restart with a store", .timeLimit(.minutes(2)))
struct PersistenceTests {
    static let done = FaultInjectingServer.body(size: 50_000, seed: 1)
    static let big = FaultInjectingServer.body(size: 400_000, seed: 2)

    func configuration(_ store: TransferStore) -> TransferManager.Configuration {
        var configuration = TransferManager.Configuration.retrying()
        configuration.store = store
        return configuration
    }

    /// A store in `folder`, whose publishing records wait a minute for others to share their commit: longer than any
    /// test sits out.
    func lingeringConfiguration(in folder: URL) throws -> TransferManager.Configuration {
        var configuration = self.configuration(try TransferStore(path: folder.appending(path: "state/state.sqlite")))
        configuration.publishingLinger = .seconds(60)
        return configuration
    }

    /// Runs a first manager until `big` has 60,000 bytes on disk (the server stalls there), then ends its scope.
    func interruptedFirstRun(
        server: FaultInjectingServer,
        folder: URL,
        store: TransferStore
    ) async throws -> BatchReport {
        try await TransferManager.withTransferManager(configuration: self.configuration(store)) { manager in
            let (batch, events) = try manager.enqueueWithEvents([
                TransferRequest(url: server.url("/done"), into: folder),
                TransferRequest(
                    url: server.url("/big"),
                    destination: .folder(folder),
                    headers: [("Authorization", "Bearer s3cret")]
                ),
            ])
            var bigStalled = false
            var doneFinished = false
            for await event in events {
                guard case .transfer(let transfer) = event else { continue }
                if transfer.url.path == "/big", case .progressed(let progress) = transfer.kind,
                    progress.receivedBytes >= 60_000
                {
                    bigStalled = true
                }
                if transfer.url.path == "/done", case .finished = transfer.kind { doneFinished = true }
                if bigStalled && doneFinished { break }
            }
            return batch
        }.report()
    }

    func resources() -> [String: FaultInjectingServer.Resource] {
        [
            "/done": .init(body: Self.done),
            "/big": .init(
                body: Self.big,
                chunkSize: 20_000,
                chunkDelay: .milliseconds(2),
                faults: [.stall(afterBytes: 60_000)]
            ),
        ]
    }

    @Test func theLastFileOfABatchIsRecordedAndRenamedWithoutWaitingForOthers() async throws {
        try await FaultInjectingServer.withServer(resources: ["/done": .init(body: Self.done)]) { server in
            try await withTemporaryDirectory { folder in
                // A record that waited for other files would miss the limit below.
                let configuration = try self.lingeringConfiguration(in: folder)
                let started = ContinuousClock.now
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.enqueue([TransferRequest(url: server.url("/done"), into: folder)]).report()
                }
                #expect(report.completed.count == 1, "\(report.items.map(\.result))")
                #expect(ContinuousClock.now - started < .seconds(30), "no other transfer was on the network")
                #expect(try Array(Data(contentsOf: folder.appending(path: "done"))) == Self.done)
            }
        }
    }

    @Test func aFileBeingPublishedWhenEverythingStopsIsReportedAsItEnds() async throws {
        try await FaultInjectingServer.withServer(resources: self.resources()) { server in
            try await withTemporaryDirectory { folder in
                // While /big is on the network, /done's record waits for others to share its commit.
                let configuration = try self.lingeringConfiguration(in: folder)
                let started = ContinuousClock.now
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    let (batch, events) = try manager.enqueueWithEvents([
                        TransferRequest(url: server.url("/done"), into: folder),
                        TransferRequest(url: server.url("/big"), into: folder),
                    ])
                    var (doneArrived, bigStalled) = (false, false)
                    for await event in events {
                        guard case .transfer(let transfer) = event, case .progressed(let progress) = transfer.kind
                        else { continue }
                        if transfer.url.path == "/done", progress.receivedBytes == Self.done.count {
                            doneArrived = true
                        }
                        if transfer.url.path == "/big", progress.receivedBytes >= 60_000 { bigStalled = true }
                        if doneArrived && bigStalled { break }
                    }
                    // /done has left the network and waits for its commit.
                    try await Task.sleep(for: .milliseconds(50))
                    manager.stopAll()
                    return await batch.report()
                }
                #expect(ContinuousClock.now - started < .seconds(30), "the stop cut the record's wait short")
                let results = Dictionary(report.items.map { ($0.url.path, $0.result.state) }) { a, _ in a }
                #expect(results["/done"] == .completed, "\(report.items.map(\.result))")
                #expect(results["/big"] == .cancelled)
                #expect(try Array(Data(contentsOf: folder.appending(path: "done"))) == Self.done)
            }
        }
    }

    @Test func aRerunSkipsCompletedFilesWithoutARequestAndResumesPartialOnesWithAValidatedRange() async throws {
        try await FaultInjectingServer.withServer(resources: self.resources()) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state/state.sqlite"))
                let first = try await self.interruptedFirstRun(server: server, folder: folder, store: store)
                #expect(first.completed.count == 1, "\(first.items.map(\.result))")
                #expect(first.cancelled.count == 1, "\(names(in: folder))")
                #expect(names(in: folder).contains { $0.hasSuffix(".part") }, "the partial file is kept")

                let before = server.requests.count
                let second = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    try await manager.enqueue([
                        TransferRequest(url: server.url("/done"), into: folder),
                        TransferRequest(
                            url: server.url("/big"),
                            destination: .folder(folder),
                            headers: [("Authorization", "Bearer s3cret")]
                        ),
                    ]).report()
                }
                #expect(second.completed.count == 2, "\(second.items.map(\.result))")
                let rerun = Array(server.requests.dropFirst(before))
                #expect(rerun.map(\.path) == ["/big"], "no request for the file already complete")
                #expect(rerun.first?.range == "bytes=60000-")
                #expect(rerun.first?.ifRange == self.resources()["/big"]?.etag)
                #expect(contents(of: folder.appending(path: "big")) == Self.big)
                #expect(contents(of: folder.appending(path: "done")) == Self.done)
                #expect(names(in: folder).filter { $0.hasSuffix(".part") }.isEmpty)
            }
        }
    }

    @Test func aRerunOverCompletedFilesListsThemInItsOwnBatchWithoutARequestOrAChangeToTheirRecords() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/a": .init(body: Self.done), "/b": .init(body: Self.big),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let requests = ["/a", "/b"].map {
                    TransferRequest(url: server.url($0), into: folder.appending(path: "out"))
                }
                let first = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    try await $0.enqueue(requests).report()
                }
                #expect(first.completed.count == 2, "\(first.items.map(\.result))")
                let firstBatch = try #require(try store.batches().last?.id)
                let recorded = try store.transfers(inBatch: firstBatch)
                #expect(recorded.map(\.state) == ["completed", "completed"])

                let before = server.requests.count
                let second = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    try await $0.enqueue(requests.reversed()).report()
                }
                #expect(second.completed.count == 2, "\(second.items.map(\.result))")
                #expect(server.requests.count == before, "no request for files complete and unchanged")
                let batches = try store.batches()
                #expect(batches.count == 2)
                #expect(batches.last?.transferCounts == ["completed": 2])
                #expect(try store.transfers(inBatch: try #require(batches.last?.id)) == recorded.reversed())
                #expect(try store.transfers(inBatch: firstBatch) == recorded, "the first batch as it was")
            }
        }
    }

    @Test func aCompletedFileThatWasDeletedOrChangedIsDownloadedAgain() async throws {
        try await FaultInjectingServer.withServer(resources: ["/done": .init(body: Self.done)]) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let request = TransferRequest(
                    url: server.url("/done"),
                    destination: .folder(folder.appending(path: "out")),
                    conflictPolicy: .overwrite
                )
                for change in ["none", "delete", "change"] {
                    let file = folder.appending(path: "out/done")
                    if change == "delete" { try FileManager.default.removeItem(at: file) }
                    if change == "change" { try Data("edited".utf8).write(to: file) }
                    let before = server.requests.count
                    let report = try await TransferManager.withTransferManager(configuration: self.configuration(store))
                    { manager in
                        try await manager.enqueue(request).report()
                    }
                    #expect(report.completed.count == 1)
                    #expect(contents(of: file) == Self.done)
                    let requested = server.requests.count - before
                    #expect(requested == (change == "none" && before > 0 ? 0 : 1), "\(change)")
                }
            }
        }
    }

    @Test func aDownloadIsRecordedCompleteBeforeItsFileIsAnnounced() async throws {
        try await FaultInjectingServer.withServer(resources: ["/done": .init(body: Self.done)]) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let request = TransferRequest(url: server.url("/done"), into: folder.appending(path: "out"))
                let recorded = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    let (_, events) = try manager.enqueueWithEvents([request])
                    for await event in events {
                        if case .transfer(let transfer) = event, case .finished(.completed) = transfer.kind {
                            return try store.transfer(request.id)
                        }
                    }
                    return nil
                }
                // Written before the rename, in full: not queued at the end for the next periodic write.
                #expect(recorded?.state == "completed")
                #expect(recorded?.finalPath?.path == folder.appending(path: "out/done").path)
                #expect(recorded?.bytesOnDisk == 50_000)
                #expect(recorded?.totalBytes == 50_000)
            }
        }
    }

    @Test func aFileWhoseNameIsTakenIsRecordedUnderTheFreeNameItLandsUnder() async throws {
        try await FaultInjectingServer.withServer(resources: ["/done": .init(body: Self.done)]) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let out = folder.appending(path: "out")
                try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
                // The first name is tried without looking, the second is looked at: both taken.
                try Data("old".utf8).write(to: out.appending(path: "done"))
                try Data("old".utf8).write(to: out.appending(path: "done.1"))
                let request = TransferRequest(url: server.url("/done"), into: out)
                let report = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    try await manager.enqueue([request]).report()
                }
                #expect(report.completed.first?.file.path.lastPathComponent == "done.2")
                #expect(try store.transfer(request.id)?.finalPath?.path == out.appending(path: "done.2").path)
                #expect(try Array(Data(contentsOf: out.appending(path: "done.2"))) == Self.done)
                #expect(try Data(contentsOf: out.appending(path: "done")) == Data("old".utf8))
                #expect(try Data(contentsOf: out.appending(path: "done.1")) == Data("old".utf8))
            }
        }
    }

    @Test func aRunningTransferIsRecordedRunningWithItsSizeAndBytesOnceItHasRunHalfASecond() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/big": .init(body: Self.big, chunkSize: 20_000, faults: [.stall(afterBytes: 60_000)])
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let request = TransferRequest(url: server.url("/big"), into: folder)
                let recorded = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    let batch = try manager.enqueue([request])
                    // The start is written with the first checkpoint, half a second in, and the bytes at most half
                    // a second after they came: wait up to a minute (the loop ends as soon as they are there).
                    // Ten seconds were once not enough with the whole suite running beside two busy processes.
                    let deadline = ContinuousClock.now + .seconds(60)
                    var row = try store.transfer(request.id)
                    while ContinuousClock.now < deadline, row?.state != "running" || row?.bytesOnDisk != 60_000 {
                        try await Task.sleep(for: .milliseconds(50))
                        row = try store.transfer(request.id)
                    }
                    batch.cancel()
                    return row
                }
                #expect(recorded?.state == "running")
                #expect(recorded?.totalBytes == 400_000, "the size from the response, written with the start")
                #expect(recorded?.bytesOnDisk == 60_000)
            }
        }
    }

    @Test func identifiersSurviveARestartAndSecretsAreNeverStored() async throws {
        try await FaultInjectingServer.withServer(resources: self.resources()) { server in
            try await withTemporaryDirectory { folder in
                let path = folder.appending(path: "state.sqlite")
                _ = try await self.interruptedFirstRun(
                    server: server,
                    folder: folder,
                    store: try TransferStore(path: path)
                )
                let reopened = try TransferStore(path: path)
                let id = TransferRequest(url: server.url("/done"), into: folder).id
                let stored = try #require(try reopened.transfer(id))
                #expect(stored.state == "completed")
                #expect(stored.finalPath?.lastPathComponent == "done")
                let big = try #require(try reopened.transfer(TransferRequest(url: server.url("/big"), into: folder).id))
                #expect(big.state == "paused")
                let database =
                    try String(contentsOf: path, encoding: .isoLatin1)
                    + ((try? String(contentsOf: folder.appending(path: "state.sqlite-wal"), encoding: .isoLatin1)) ?? "")
                #expect(!database.contains("s3cret"))
            }
        }
    }

    @Test func resumesAStoredBatchUnderItsOwnIdentifier() async throws {
        try await FaultInjectingServer.withServer(resources: self.resources()) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let first = try await self.interruptedFirstRun(server: server, folder: folder, store: store)
                #expect(try store.unfinishedBatches().map(\.id) == [first.batchID])
                let report = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    try await manager.resumeStoredBatch(first.batchID).report()
                }
                #expect(report.batchID == first.batchID)
                #expect(report.completed.count == 2)
                #expect(try store.unfinishedBatches().isEmpty)
                #expect(contents(of: folder.appending(path: "big")) == Self.big)
            }
        }
    }

    @Test func aResumedBatchsEventsAskedForUpFrontShowEachTransferFromItsStartToItsEnd() async throws {
        try await FaultInjectingServer.withServer(resources: self.resources()) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let first = try await self.interruptedFirstRun(server: server, folder: folder, store: store)
                let kinds = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    let batch = try manager.resumeStoredBatch(first.batchID, events: .lifecycle)
                    var kinds: [String: [String]] = [:]
                    for await event in batch.events(.lifecycle) {
                        guard case .transfer(let transfer) = event else { continue }
                        switch transfer.kind {
                        case .started(let offset): kinds[transfer.url.path, default: []].append("started@\(offset)")
                        case .finished(let result): kinds[transfer.url.path, default: []].append("\(result.state)")
                        default: break
                        }
                    }
                    return kinds
                }
                // The completed file is found unchanged (no start); the partial one resumes where it stopped.
                #expect(kinds == ["/done": ["completed"], "/big": ["started@60000", "completed"]])
            }
        }
    }

    @Test func aResumedBatchSendsTheHeadersGivenAgainWithEveryRequest() async throws {
        try await FaultInjectingServer.withServer(resources: self.resources()) { server in
            try await withTemporaryDirectory { folder in
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let first = try await self.interruptedFirstRun(server: server, folder: folder, store: store)
                let before = server.requests.count
                let report = try await TransferManager.withTransferManager(configuration: self.configuration(store)) {
                    manager in
                    try await manager.resumeStoredBatch(
                        first.batchID,
                        headers: [("Authorization", "Bearer again"), ("X-Extra", "1")]
                    ).report()
                }
                #expect(report.completed.count == 2)
                let resumed = Array(server.requests.dropFirst(before))
                #expect(resumed.map(\.path) == ["/big"])
                #expect(resumed.first?.headers["authorization"] == "Bearer again", "the secret the store never kept")
                #expect(resumed.first?.headers["x-extra"] == "1")
                #expect(resumed.first?.range == "bytes=60000-")
            }
        }
    }

    @Test func twoManagersSharingAStoreNeverDownloadTheSameFileAtOnce() async throws {
        let slow = FaultInjectingServer.Resource(body: Self.big, chunkSize: 20_000, chunkDelay: .milliseconds(20))
        try await FaultInjectingServer.withServer(resources: ["/big": slow]) { server in
            try await withTemporaryDirectory { folder in
                let path = folder.appending(path: "state.sqlite")
                let request = TransferRequest(url: server.url("/big"), into: folder.appending(path: "out"))
                // Two connections to one file, as two processes would have. Either may claim it first (they start
                // together), so both wait patiently for the other.
                func patient() throws -> TransferManager.Configuration {
                    var configuration = self.configuration(try TransferStore(path: path))
                    configuration.retryPolicy.maximumAttempts = 100
                    configuration.retryPolicy.baseDelay = .milliseconds(50)
                    configuration.retryPolicy.maximumDelay = .milliseconds(100)
                    return configuration
                }
                async let first = TransferManager.withTransferManager(configuration: try patient()) {
                    try await $0.enqueue(request).report()
                }
                async let second = TransferManager.withTransferManager(configuration: try patient()) {
                    try await $0.enqueue(request).report()
                }
                let (a, b) = try await (first, second)
                #expect(
                    a.completed.count == 1 && b.completed.count == 1,
                    "\(a.failed.map(\.error)) \(b.failed.map(\.error))"
                )
                #expect(server.requests.count == 1, "one download, and the other manager saw it complete")
                #expect(server.maximumConcurrentRequests == 1)
                #expect(a.completed.first?.file.path == b.completed.first?.file.path)
                #expect(names(in: folder.appending(path: "out")) == ["big"])
            }
        }
    }
}
