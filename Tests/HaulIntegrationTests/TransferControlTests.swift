import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Pausing, resuming, cancelling and joining transfers", .timeLimit(.minutes(2)))
struct TransferControlTests {
    static let slowBody = FaultInjectingServer.body(size: 400_000, seed: 42)
    /// A resource whose first response sends 60,000 bytes and then nothing until the client gives up, so a test
    /// can pause or cancel it mid-body however slow the machine is; later requests are answered in full.
    static func slowResource() -> FaultInjectingServer.Resource {
        .init(body: slowBody, chunkSize: 10_000, chunkDelay: .milliseconds(5), faults: [.stall(afterBytes: 60_000)])
    }

    @Test func aPausedTransferContinuesFromItsPartialFileWithAValidatedRange() async throws {
        try await FaultInjectingServer.withServer(resources: ["/big": Self.slowResource()]) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let batch = try manager.enqueue(TransferRequest(url: server.url("/big"), into: folder))
                    let progressed = await batch.firstEvent { event in
                        if case .transfer(let e) = event, case .progressed(let p) = e.kind, p.receivedBytes >= 50_000 {
                            return true
                        }
                        return false
                    }
                    let id = try #require(progressed?.transferID)
                    manager.pause(id)
                    _ = await batch.firstEvent { event in
                        if case .transfer(let e) = event, case .paused = e.kind { return true }
                        return false
                    }
                    #expect(manager.state(of: id) == .paused)
                    manager.resume(id)
                    return await batch.report()
                }
                #expect(report.completed.count == 1)
                #expect(contents(of: folder.appending(path: "big")) == Self.slowBody)
                let requests = server.requests
                #expect(requests.count == 2)
                #expect(requests[0].range == nil)
                let range = try #require(requests[1].range)
                let offset = try #require(Int(range.dropFirst("bytes=".count).dropLast()))
                #expect(offset >= 50_000 && offset < Self.slowBody.count)
                #expect(requests[1].ifRange == Self.slowResource().etag)
                #expect(names(in: folder) == ["big"])
            }
        }
    }

    @Test func pausingAndResumingABatchCompletesEveryFile() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for index in 0..<4 { resources["/f\(index)"] = Self.slowResource() }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 2)) {
                    manager in
                    let batch = try manager.enqueue(
                        (0..<4).map { TransferRequest(url: server.url("/f\($0)"), into: folder) }
                    )
                    _ = await batch.firstEvent { event in
                        if case .progressed(let p) = event, p.transferredBytes >= 120_000 { return true }
                        return false
                    }
                    batch.pause()
                    var paused = 0
                    _ = await batch.firstEvent { event in
                        if case .transfer(let e) = event, case .paused = e.kind { paused += 1 }
                        return paused == 4
                    }
                    #expect(!manager.isActive)
                    batch.resume()
                    return await batch.report()
                }
                #expect(report.completed.count == 4)
                for index in 0..<4 { #expect(contents(of: folder.appending(path: "f\(index)")) == Self.slowBody) }
                #expect(server.requests.contains { $0.range != nil })
            }
        }
    }

    @Test func cancellingATransferRemovesItsPartialFileAndReportsItCancelled() async throws {
        try await FaultInjectingServer.withServer(resources: ["/big": Self.slowResource()]) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let batch = try manager.enqueue(TransferRequest(url: server.url("/big"), into: folder))
                    let progressed = await batch.firstEvent { event in
                        if case .transfer(let e) = event, case .progressed(let p) = e.kind, p.receivedBytes > 0 {
                            return true
                        }
                        return false
                    }
                    let id = try #require(progressed?.transferID)
                    manager.cancel(id)
                    return await batch.report()
                }
                #expect(report.cancelled.count == 1)
                #expect(names(in: folder).isEmpty)
            }
        }
    }

    @Test func aFileOfAnnouncedLengthHasItsWholeLengthReservedOnDiskWhileItsBytesArrive() async throws {
        // Past the size of files made without a name, so that the partial file has its `.part` name to look at.
        let body = FaultInjectingServer.body(size: 2_000_000, seed: 43)
        let resource = FaultInjectingServer.Resource(body: body, faults: [.stall(afterBytes: 60_000)])
        try await FaultInjectingServer.withServer(resources: ["/big": resource]) { server in
            try await withTemporaryDirectory { folder in
                // Whether this folder's file system reserves at all (tmpfs is left alone, some cannot).
                let probe = folder.appending(path: "probe").path
                let reserves = try PartialFile(openingAt: probe).reserve(toLength: 4 << 20)
                PartialFile.remove(probe)
                let seen = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let request = TransferRequest(url: server.url("/big"), into: folder)
                    _ = try manager.enqueue(request)
                    let deadline = ContinuousClock.now + .seconds(30)
                    while manager.progress(of: request.id)?.receivedBytes != 60_000, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(2))
                    }
                    let part = try #require(names(in: folder).first { $0.hasSuffix(".part") })
                    var status = stat()
                    #expect(stat(folder.appending(path: part).path, &status) == 0)
                    manager.cancel(request.id)
                    return (size: Int64(status.st_size), allocated: Int64(status.st_blocks) * 512)
                }
                // What was written of what arrived (writes are gathered): where a resumed attempt starts.
                #expect(seen.size <= 60_000)
                if reserves { #expect(seen.allocated >= 2_000_000) }
            }
        }
    }

    /// Whether files in the temporary folder get their blocks reserved: not on tmpfs, nor where `fallocate` fails.
    static let temporaryFolderReservesBlocks: Bool = {
        let path = FileManager.default.temporaryDirectory.appending(path: "haul-probe-\(UUID().uuidString)").path
        defer { PartialFile.remove(path) }
        guard let file = try? PartialFile(openingAt: path) else { return false }
        return (try? file.reserve(toLength: 4 << 20)) ?? false
    }()

    @Test(
        .enabled(
            if: TransferControlTests.temporaryFolderReservesBlocks,
            "the temporary folder's file system reserves no blocks (tmpfs, or no fallocate): the disk is never asked"
        )
    )
    func aFileLargerThanTheRoomLeftOnDiskFailsBeforeItsBodyAndLeavesNothingWhileTheRestComplete() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            // A petabyte announced: more than any disk this runs on has free.
            "/huge": .init(body: Self.slowBody, faults: [.announceLength(1 << 50)]),
            "/fine": .init(body: Self.slowBody),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download([server.url("/huge"), server.url("/fine")], into: folder)
                }
                let failure = try #require(report.failed.first?.error)
                #expect(failure.code == .fileSystem)
                #expect(failure.message.contains("Not enough room"), "\(failure.message)")
                #expect(report.completed.count == 1)
                #expect(names(in: folder) == ["fine"], "nothing of the huge file is left")
            }
        }
    }

    @Test func cancellingTheRestFromInsideTheProgressLoopStopsTheBatch() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        resources["/quick"] = .init(body: [1, 2, 3])
        for index in 0..<5 { resources["/slow\(index)"] = Self.slowResource() }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 1)) {
                    manager in
                    let urls = [server.url("/quick")] + (0..<5).map { server.url("/slow\($0)") }
                    let batch = try manager.enqueue(urls.map { TransferRequest(url: $0, into: folder) })
                    for await event in batch.events {
                        if case .progressed(let progress) = event, progress.completedFiles == 1 {
                            batch.cancel()
                        }
                    }
                    return await batch.report()
                }
                #expect(report.completed.count == 1)
                #expect(report.cancelled.count == 5)
                #expect(names(in: folder) == ["quick"])
            }
        }
    }

    @Test func cancellingTheScopesTaskStopsItsTransfersAndEndsTheScope() async throws {
        try await FaultInjectingServer.withServer(resources: ["/big": Self.slowResource()]) { server in
            try await withTemporaryDirectory { folder in
                let (started, startedContinuation) = AsyncStream<Void>.makeStream()
                let scope = Task {
                    try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                        let batch = try manager.enqueue(TransferRequest(url: server.url("/big"), into: folder))
                        _ = await batch.firstEvent { event in
                            if case .transfer(let e) = event, case .progressed(let p) = e.kind {
                                return p.receivedBytes > 0
                            }
                            return false
                        }
                        startedContinuation.yield()
                        // Not cancellable itself: the scope's cancellation must end the batch for it to return.
                        return await batch.report()
                    }
                }
                for await _ in started { break }
                let stopped = ContinuousClock.now
                scope.cancel()
                let report = try await scope.value
                #expect(ContinuousClock.now - stopped < .seconds(30))
                #expect(report.cancelled.count == 1)
                // Without a store, stopping cancels: the partial file goes too.
                #expect(names(in: folder).isEmpty)
            }
        }
    }

    @Test func theSameURLToTheSameFolderJoinsTheRunningTransfer() async throws {
        let paced = FaultInjectingServer.Resource(body: Self.slowBody, chunkSize: 10_000, chunkDelay: .milliseconds(5))
        try await FaultInjectingServer.withServer(resources: ["/big": paced]) { server in
            try await withTemporaryDirectory { folder in
                let (first, second) = try await TransferManager.withTransferManager(configuration: .testing()) {
                    manager in
                    let a = try manager.enqueue(TransferRequest(url: server.url("/big"), into: folder))
                    let b = try manager.enqueue(TransferRequest(url: server.url("/big"), into: folder))
                    return (await a.report(), await b.report())
                }
                #expect(server.requests.count == 1)
                #expect(first.completed.first?.file == second.completed.first?.file)
                #expect(first.items.first?.id == second.items.first?.id)
                #expect(names(in: folder) == ["big"])
            }
        }
    }

    @Test func anIdentifierReusedForAnotherURLFailsThatItemOnly() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: [1]), "/b": .init(body: [2])]) {
            server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue([
                        TransferRequest(url: server.url("/a"), destination: .folder(folder), id: "photo"),
                        TransferRequest(url: server.url("/b"), destination: .folder(folder), id: "photo"),
                    ]).report()
                }
                #expect(report.completed.count == 1)
                #expect(report.failed.first?.error.code == .duplicateTransfer)
            }
        }
    }

    @Test func transfersCanBeAddedToARunningBatchAndAnOpenBatchFinishesWhenSealed() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: [1]), "/b": .init(body: [2])]) {
            server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let batch = try manager.makeBatch()
                    // Its events from now: the first transfer may end before `add` returns.
                    _ = batch.events
                    try batch.add(TransferRequest(url: server.url("/a"), into: folder))
                    _ = await batch.firstEvent { event in
                        if case .transfer(let e) = event, case .finished = e.kind { return true }
                        return false
                    }
                    try batch.add(TransferRequest(url: server.url("/b"), into: folder))
                    batch.seal()
                    return await batch.report()
                }
                #expect(report.completed.count == 2)
                #expect(names(in: folder) == ["a", "b"])
            }
        }
    }

    @Test func slicesAddedToABatchRunInTheirOrderAndNoneIsAddedOnceTheBatchHasFinished() async throws {
        let paths = (0..<10).map { "/f\($0)" }
        let resources = Dictionary(uniqueKeysWithValues: paths.map { ($0, FaultInjectingServer.Resource(body: [1])) })
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let (report, refused) = try await TransferManager.withTransferManager(configuration: .testing()) {
                    manager in
                    let batch = try manager.makeBatch()
                    let requests = paths.map { TransferRequest(url: server.url($0), into: folder) }
                    try batch.add(contentsOf: Array(requests[..<6]))
                    try batch.add(contentsOf: [])
                    try batch.add(contentsOf: Array(requests[6...]))
                    batch.seal()
                    let report = await batch.report()
                    let late = TransferRequest(url: server.url("/late"), into: folder)
                    let refused = #expect(throws: HaulError.self) { try batch.add(contentsOf: [late, late]) }
                    return (report, refused?.code)
                }
                #expect(report.items.map(\.url.path) == paths, "one item per request, in order")
                #expect(report.completed.count == 10)
                #expect(refused == .batchFinished)
                #expect(names(in: folder) == paths.map { String($0.dropFirst()) }.sorted())
            }
        }
    }

    @Test func whatIsStillRunningWhenTheScopeEndsIsCancelled() async throws {
        try await FaultInjectingServer.withServer(resources: ["/big": Self.slowResource()]) { server in
            try await withTemporaryDirectory { folder in
                let batch = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try manager.enqueue(TransferRequest(url: server.url("/big"), into: folder))
                }
                #expect(await batch.report().cancelled.count == 1)
                #expect(names(in: folder).isEmpty)
            }
        }
    }
}

extension BatchEvent {
    var transferID: TransferID? {
        if case .transfer(let event) = self { return event.id }
        return nil
    }
}
