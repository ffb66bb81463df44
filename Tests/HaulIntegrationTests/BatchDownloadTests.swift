import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Downloading batches", .timeLimit(.minutes(2)))
struct BatchDownloadTests {
    @Test func downloadsTwoHundredMixedSizeFilesByteForByte() async throws {
        let sizes = (0..<200).map { index in [0, 1, 1000, 65_536, 300_000, 2_500_000][index % 6] + index }
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for (index, size) in sizes.enumerated() {
            resources["/files/f\(index).bin"] = .init(body: FaultInjectingServer.body(size: size, seed: UInt64(index)))
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download((0..<200).map { server.url("/files/f\($0).bin") }, into: folder)
                }
                #expect(report.items.count == 200)
                #expect(report.completed.count == 200)
                for (index, size) in sizes.enumerated() {
                    #expect(
                        contents(of: folder.appending(path: "f\(index).bin"))
                            == FaultInjectingServer.body(size: size, seed: UInt64(index))
                    )
                }
                #expect(names(in: folder).count == 200, "no partial files are left behind")
            }
        }
    }

    @Test func reportsNotFoundAndRefusedConnectionsPerItemWhileTheRestComplete() async throws {
        let body = FaultInjectingServer.body(size: 10_000, seed: 1)
        try await FaultInjectingServer.withRefusingPort { refusing in
            try await self.downloadWithNotFoundAndRefused(body: body, refusing: refusing)
        }
    }

    private func downloadWithNotFoundAndRefused(body: [UInt8], refusing: Int) async throws {
        try await FaultInjectingServer.withServer(resources: ["/ok": .init(body: body)]) { server in
            try await withTemporaryDirectory { folder in
                let urls = [
                    server.url("/ok"), server.url("/missing"), URL(string: "http://127.0.0.1:\(refusing)/gone")!,
                ]
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download(urls, into: folder)
                }
                #expect(report.completed.map(\.item.url) == [urls[0]])
                let errors = report.errors
                let notFound = try #require(errors[report.items[1].id])
                #expect(notFound.code == .httpStatus)
                #expect(notFound.httpStatus == 404)
                let refused = try #require(errors[report.items[2].id])
                #expect(refused.code == .connectionFailed)
                #expect(refused.message == "Could not connect to 127.0.0.1:\(refusing): Connection refused")
                #expect(refused.httpStatus == nil)
                #expect(names(in: folder) == ["ok"], "a 404 body is never written")
            }
        }
    }

    @Test func anEmptyBatchFinishesAtOnceWithAnEmptyReport() async throws {
        let report = try await TransferManager.withTransferManager { manager in
            try await manager.enqueue([]).report()
        }
        #expect(report.items.isEmpty)
        #expect(report.isSuccess)
    }

    @Test func neverRunsMoreThanTheConcurrencyLimit() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for index in 0..<12 {
            resources["/slow\(index)"] = .init(
                body: FaultInjectingServer.body(size: 40_000, seed: UInt64(index)),
                chunkSize: 8_000,
                chunkDelay: .milliseconds(20)
            )
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 3)) {
                    manager in
                    try await manager.download((0..<12).map { server.url("/slow\($0)") }, into: folder)
                }
                #expect(report.completed.count == 12)
                #expect(server.maximumConcurrentRequests == 3)
            }
        }
    }

    @Test func neverRunsMoreThanThePerHostLimitAgainstOneHost() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for index in 0..<8 {
            resources["/slow\(index)"] = .init(
                body: FaultInjectingServer.body(size: 40_000, seed: UInt64(index)),
                chunkSize: 8_000,
                chunkDelay: .milliseconds(20)
            )
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(
                    configuration: .testing(concurrent: 8, perHost: 2)
                ) { manager in
                    try await manager.download((0..<8).map { server.url("/slow\($0)") }, into: folder)
                }
                #expect(report.completed.count == 8)
                #expect(server.maximumConcurrentRequests == 2)
            }
        }
    }

    /// With events handed over as they happen, every snapshot taken reaches the stream; in bursts, a held snapshot
    /// gives way to the next, and how many remain depends on the machine's speed.
    @Test(arguments: [Duration.zero, TransferManager.Configuration().eventDeliveryInterval])
    func reportsProgressThatNeverGoesBackwardsAndEndsAtExactlyTheTotal(eventDeliveryInterval: Duration) async throws {
        let sizes = [100_000, 0, 250_000, 5_000, 1_000_000]
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for (index, size) in sizes.enumerated() {
            resources["/p\(index)"] = .init(
                body: FaultInjectingServer.body(size: size, seed: UInt64(index)),
                chunkSize: 50_000,
                chunkDelay: .milliseconds(5)
            )
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing(concurrent: 2)
                configuration.eventDeliveryInterval = eventDeliveryInterval
                let snapshots = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    let batch = try manager.enqueue(
                        sizes.indices.map { TransferRequest(url: server.url("/p\($0)"), into: folder) }
                    )
                    var snapshots: [BatchProgress] = []
                    for await event in batch.events {
                        if case .progressed(let progress) = event { snapshots.append(progress) }
                    }
                    return snapshots
                }
                #expect(snapshots.count > (eventDeliveryInterval == .zero ? 3 : 0))
                for (earlier, later) in zip(snapshots, snapshots.dropFirst()) {
                    #expect(later.fractionCompleted >= earlier.fractionCompleted)
                    #expect(later.transferredBytes >= earlier.transferredBytes)
                }
                let last = try #require(snapshots.last)
                #expect(last.fractionCompleted == 1)
                #expect(last.transferredBytes == Int64(sizes.reduce(0, +)))
                #expect(last.expectedBytes == Int64(sizes.reduce(0, +)))
                #expect(last.completedFiles == sizes.count)
                #expect(last.remainingFiles == 0)
            }
        }
    }

    @Test func aStreamOfFailuresCarriesOnlyTheFailedTransfersLastEventsAndTheEnd() async throws {
        let body = FaultInjectingServer.body(size: 200_000, seed: 2)
        let resource = FaultInjectingServer.Resource(body: body, chunkSize: 20_000, chunkDelay: .milliseconds(2))
        try await FaultInjectingServer.withServer(resources: ["/a": resource, "/b": resource]) { server in
            try await withTemporaryDirectory { folder in
                let paths = ["/a", "/missing-1", "/b", "/missing-2"]
                let events = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let batch = try manager.makeBatch()
                    // The first request decides the stream's selection; a later read returns the same stream.
                    _ = batch.events(.failures)
                    let stream = batch.events
                    for path in paths { try batch.add(TransferRequest(url: server.url(path), into: folder)) }
                    batch.seal()
                    var events: [BatchEvent] = []
                    for await event in stream { events.append(event) }
                    return events
                }
                var failedURLs: [String] = []
                for event in events.dropLast() {
                    guard case .transfer(let transfer) = event, case .finished(.failed(let error)) = transfer.kind
                    else {
                        Issue.record("not a failure: \(event)")
                        continue
                    }
                    #expect(error.httpStatus == 404)
                    failedURLs.append(transfer.url.path)
                }
                #expect(failedURLs.sorted() == ["/missing-1", "/missing-2"])
                guard case .finished(let report) = events.last else {
                    Issue.record("the stream does not end with the batch's report")
                    return
                }
                #expect(report.completed.count == 2)
                #expect(report.items.count == 4)
            }
        }
    }

    @Test func aStreamOfResultsCarriesEveryTransfersLastEventButNoProgress() async throws {
        let events = try await TransferManager.batchEventsOfTwoSlowFilesAndAMissingOne(.results)
        var results: [String: TransferState] = [:]
        for event in events.dropLast() {
            guard case .transfer(let transfer) = event, case .finished(let result) = transfer.kind else {
                Issue.record("not a result: \(event)")
                continue
            }
            results[transfer.url.path] = result.state
        }
        #expect(results == ["/a": .completed, "/missing": .failed, "/b": .completed])
        guard case .finished = events.last else {
            Issue.record("the stream does not end with the batch's report")
            return
        }
    }

    @Test func createsIntermediateFoldersAndWritesToAnExplicitFilePath() async throws {
        let body = FaultInjectingServer.body(size: 3_000, seed: 9)
        try await FaultInjectingServer.withServer(resources: ["/x": .init(body: body)]) { server in
            try await withTemporaryDirectory { folder in
                let target = folder.appending(path: "a/b/c/renamed.dat")
                let report = try await TransferManager.withTransferManager { manager in
                    try await manager.enqueue(TransferRequest(url: server.url("/x"), destination: .file(target)))
                        .report()
                }
                #expect(report.completed.first?.file.path.standardizedFileURL == target.standardizedFileURL)
                #expect(contents(of: target) == body)
            }
        }
    }

    @Test func computesTheSHA256WhenAskedAndVerifiesChecksums() async throws {
        let body = Array("hello".utf8)
        let sha256 = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        try await FaultInjectingServer.withServer(resources: ["/h": .init(body: body), "/h2": .init(body: body)]) {
            server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager { manager in
                    try await manager.enqueue([
                        TransferRequest(url: server.url("/h"), destination: .folder(folder), computesSHA256: true),
                        TransferRequest(
                            url: server.url("/h2"),
                            destination: .folder(folder),
                            checksum: Checksum(algorithm: .md5, hexDigest: "00000000000000000000000000000000")
                        ),
                    ]).report()
                }
                #expect(report.completed.first?.file.sha256 == sha256)
                #expect(report.failed.first?.error.code == .checksumMismatch)
                #expect(names(in: folder) == ["h"], "a file that fails its checksum is not published")
            }
        }
    }

    @Test func failsAnItemWhoseSizeDiffersFromTheExpectedSize() async throws {
        try await FaultInjectingServer.withServer(resources: ["/s": .init(body: [1, 2, 3])]) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager { manager in
                    try await manager.enqueue(
                        TransferRequest(url: server.url("/s"), destination: .folder(folder), expectedByteCount: 4)
                    ).report()
                }
                #expect(report.failed.first?.error.code == .sizeMismatch)
            }
        }
    }

    @Test func anItemThatFailsAtOnceDoesNotEndTheBatchBeforeTheRestIsAdded() async throws {
        try await FaultInjectingServer.withServer(resources: ["/ok": .init(body: [1, 2, 3])]) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download([URL(string: "ftp://example.com/a")!, server.url("/ok")], into: folder)
                }
                #expect(report.items.count == 2)
                #expect(report.completed.count == 1)
            }
        }
    }

    @Test func failsAnUnsupportedSchemeOnItsOwn() async throws {
        try await withTemporaryDirectory { folder in
            let report = try await TransferManager.withTransferManager { manager in
                try await manager.download([URL(string: "ftp://example.com/file")!], into: folder)
            }
            #expect(report.failed.first?.error.code == .invalidRequest)
        }
    }
}
