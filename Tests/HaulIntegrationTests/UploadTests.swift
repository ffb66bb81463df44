import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Uploading batches of files", .timeLimit(.minutes(2)))
struct UploadTests {
    /// Writes files of the given sizes into `folder` and returns their URLs and bytes.
    static func makeFiles(_ sizes: [Int], in folder: URL) throws -> [(url: URL, bytes: [UInt8])] {
        try sizes.enumerated().map { index, size in
            let bytes = FaultInjectingServer.body(size: size, seed: UInt64(index + 1))
            let url = folder.appending(path: "file-\(index).bin")
            try Data(bytes).write(to: url)
            return (url, bytes)
        }
    }

    @Test func aBatchOfFilesIsUploadedWithPutByteForByte() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([0, 1, 1_000, 65_536, 300_000, 1_200_000, 7, 2_000_000], in: folder)
                let report = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 3)) {
                    manager in
                    try await manager.enqueue(
                        files.enumerated().map { index, file in
                            TransferRequest.upload(file: file.url, to: server.url("/up/\(index)"))
                        }
                    ).report()
                }
                #expect(report.isSuccess)
                #expect(report.completed.map(\.file.byteCount) == files.map { Int64($0.bytes.count) })
                #expect(report.completed.map(\.file.path) == files.map(\.url.standardizedFileURL))
                let uploads = server.uploads
                for (index, file) in files.enumerated() {
                    #expect(uploads["/up/\(index)"]?.body == file.bytes, "file \(index)")
                    #expect(uploads["/up/\(index)"]?.contentType == "application/octet-stream")
                }
                #expect(server.requests.allSatisfy { $0.method == "PUT" })
                #expect(
                    server.requests.map { $0.headers["content-length"] }.sorted { ($0 ?? "") < ($1 ?? "") }
                        == files.map { String($0.bytes.count) }.sorted()
                )
                #expect(server.maximumConcurrentRequests <= 3)
            }
        }
    }

    @Test func aMultipartPostCarriesTheFileInTheNamedFieldUnderItsName() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([150_000], in: folder)
                let data = Data("in-memory \"report\"".utf8)
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue([
                        .upload(file: files[0].url, to: server.url("/form"), method: .multipart(field: "photo")),
                        .upload(
                            data: data,
                            named: "notes \"v2\".txt",
                            to: server.url("/form-data"),
                            method: .multipart(),
                            contentType: "text/plain"
                        ),
                    ]).report()
                }
                #expect(report.isSuccess)
                let photo = try #require(server.uploads["/form"])
                #expect(photo.body == files[0].bytes)
                #expect(photo.field == "photo")
                #expect(photo.fileName == "file-0.bin")
                let notes = try #require(server.uploads["/form-data"])
                #expect(notes.body == [UInt8](data))
                #expect(notes.field == "file")
                #expect(notes.fileName == "notes %22v2%22.txt")
                #expect(server.requests.allSatisfy { $0.method == "POST" })
            }
        }
    }

    @Test func anUploadIsRetriedAfterA503WithRetryAfterAndAfterAResetMidBody() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([900_000], in: folder)
                server.setUploadFaults(
                    [.retryAfter(status: 503, value: "1"), .closeConnection(afterBytes: 300_000)],
                    at: "/r"
                )
                var configuration = TransferManager.Configuration.testing()
                configuration.retryPolicy.baseDelay = .milliseconds(10)
                let (report, progress) = try await TransferManager.withTransferManager(configuration: configuration) {
                    manager in
                    let batch = try manager.enqueue(.upload(file: files[0].url, to: server.url("/r")))
                    var progress: [Int64] = []
                    for await event in batch.events {
                        if case .transfer(let e) = event, case .progressed(let p) = e.kind {
                            progress.append(p.receivedBytes)
                        }
                    }
                    return (await batch.report(), progress)
                }
                #expect(report.isSuccess)
                #expect(report.items[0].attempts == 3)
                #expect(server.uploads["/r"]?.body == files[0].bytes)
                let requests = server.requests
                #expect(requests.count == 3)
                #expect(requests[2].receivedAt - requests[0].receivedAt >= .milliseconds(900))
                #expect(progress == progress.sorted(), "progress never goes backwards on a retry")
                #expect(progress.last == 900_000)
            }
        }
    }

    @Test func aPermanentFailureOrAMissingFileFailsOnlyItsOwnItem() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([10_000, 20_000], in: folder)
                server.setUploadFaults([.status(403)], at: "/forbidden")
                let missing = folder.appending(path: "missing.bin")
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue([
                        .upload(file: files[0].url, to: server.url("/forbidden"), id: "forbidden"),
                        .upload(file: missing, to: server.url("/missing"), id: "missing"),
                        .upload(file: files[1].url, to: server.url("/fine"), id: "fine"),
                    ]).report()
                }
                #expect(report.completed.map(\.item.id) == ["fine"])
                let errors = report.errors
                #expect(errors["forbidden"]?.code == .httpStatus)
                #expect(errors["forbidden"]?.httpStatus == 403)
                #expect(errors["missing"]?.code == .fileSystem)
                #expect(errors["missing"]?.message.contains("missing.bin") == true)
                #expect(report.items.first { $0.id == "forbidden" }?.attempts == 1, "a 403 is not retried")
                #expect(server.uploads.keys.sorted() == ["/fine"])
            }
        }
    }

    @Test func aHeaderThatWouldEndItsLineFailsAnUploadWithTheErrorADownloadGets() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([10_000, 10_000], in: folder)
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue([
                        .upload(
                            file: files[0].url,
                            to: server.url("/bad"),
                            id: "bad",
                            headers: [("X-Token", "1\r\nX-Injected: yes")]
                        ),
                        .upload(file: files[1].url, to: server.url("/fine"), id: "fine", headers: [("X-Token", "2")]),
                    ]).report()
                }
                #expect(report.completed.map(\.item.id) == ["fine"])
                #expect(report.errors["bad"]?.code == .invalidRequest)
                #expect(report.errors["bad"]?.message == "The value of the header \"X-Token\" has a control character")
                #expect(report.items.first { $0.id == "bad" }?.attempts == 1, "not retried")
                #expect(server.requests.map(\.path) == ["/fine"])
            }
        }
    }

    @Test func batchProgressIsWeightedByBytesAndEndsAtTheTotal() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let sizes = [1_000_000, 10_000, 500_000, 0, 2_500_000]
                let files = try Self.makeFiles(sizes, in: folder)
                let snapshots = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 2)) {
                    manager in
                    let batch = try manager.enqueue(
                        files.enumerated().map { .upload(file: $1.url, to: server.url("/p\($0)")) }
                    )
                    var snapshots: [BatchProgress] = []
                    for await event in batch.events {
                        if case .progressed(let progress) = event { snapshots.append(progress) }
                    }
                    return snapshots
                }
                let total = Int64(sizes.reduce(0, +))
                #expect(snapshots.allSatisfy { $0.expectedBytes == total }, "every size is known before the start")
                #expect(snapshots.map(\.transferredBytes) == snapshots.map(\.transferredBytes).sorted())
                #expect(snapshots.map(\.fractionCompleted) == snapshots.map(\.fractionCompleted).sorted())
                #expect(snapshots.last?.transferredBytes == total)
                #expect(snapshots.last?.completedFiles == sizes.count)
            }
        }
    }

    @Test func cancellingTheBatchFromItsProgressEventsStopsTheRestAndReportsThemCancelled() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                // The cancel comes after 100,000 bytes (0.1 s at this rate); the first two files take 4 s, so even
                // a machine that delivers the event seconds late (seen under load, with 400,000-byte files) cancels
                // at least four.
                let files = try Self.makeFiles(Array(repeating: 2_000_000, count: 6), in: folder)
                var configuration = TransferManager.Configuration.testing(concurrent: 2)
                configuration.bandwidthLimit = 1_000_000
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    let batch = try manager.enqueue(
                        files.enumerated().map { .upload(file: $1.url, to: server.url("/c\($0)")) }
                    )
                    for await event in batch.events {
                        if case .progressed(let progress) = event, progress.transferredBytes > 100_000 {
                            batch.cancel()
                        }
                    }
                    return await batch.report()
                }
                #expect(report.cancelled.count >= 4)
                #expect(report.cancelled.count + report.completed.count == 6)
                // A cancel that comes as a running upload's last bytes leave may find the server storing it: that
                // file is reported cancelled (no answer confirmed it) though the server has it (seen once under load).
                #expect(server.uploads.count >= report.completed.count, "every completed upload is on the server")
                #expect(server.uploads.count <= report.completed.count + 2, "besides those, only the two running")
                #expect(server.requests.count <= 2 + report.completed.count, "waiting items never started")
            }
        }
    }

    @Test func aPausedUploadStartsAgainFromTheFirstByteWithoutProgressGoingBack() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([1_500_000], in: folder)
                var configuration = TransferManager.Configuration.testing()
                // 3 s in all at this rate: the pause at 100,000 bytes comes long before the end, however busy the machine.
                configuration.bandwidthLimit = 500_000
                let (report, progress) = try await TransferManager.withTransferManager(configuration: configuration) {
                    manager in
                    let batch = try manager.enqueue(.upload(file: files[0].url, to: server.url("/paused"), id: "p"))
                    var progress: [Int64] = []
                    var paused = false
                    for await event in batch.events {
                        guard case .transfer(let e) = event else { continue }
                        switch e.kind {
                        case .progressed(let p):
                            progress.append(p.receivedBytes)
                            if !paused, p.receivedBytes >= 100_000 {
                                paused = true
                                manager.pause("p")
                            }
                        case .paused:
                            manager.resume("p")
                        default:
                            break
                        }
                    }
                    return (await batch.report(), progress)
                }
                #expect(report.isSuccess)
                #expect(server.uploads["/paused"]?.body == files[0].bytes)
                #expect(server.requests.count == 2)
                #expect(progress == progress.sorted())
                #expect(progress.last == 1_500_000)
            }
        }
    }

    @Test func aRerunOnTheSameStoreDoesNotSendFilesAlreadyUploadedUnlessTheyChanged() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([50_000, 60_000, 70_000], in: folder)
                server.setUploadFaults([.status(403)], at: "/s2")
                var configuration = TransferManager.Configuration.testing()
                configuration.store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let requests = files.enumerated().map {
                    TransferRequest.upload(file: $1.url, to: server.url("/s\($0)"))
                }
                let first = try await TransferManager.withTransferManager(configuration: configuration) {
                    try await $0.enqueue(requests).report()
                }
                #expect(first.completed.count == 2)
                #expect(server.requests.count == 3)

                // The first file changes; the second is unchanged; the third failed and is tried again.
                try await Task.sleep(for: .milliseconds(20))
                try Data(FaultInjectingServer.body(size: 55_000, seed: 99)).write(to: files[0].url)
                let rerun = requests.enumerated().map { index, request in
                    index == 0 ? TransferRequest.upload(file: files[0].url, to: server.url("/s0")) : request
                }
                let second = try await TransferManager.withTransferManager(configuration: configuration) {
                    try await $0.enqueue(rerun).report()
                }
                #expect(second.isSuccess)
                #expect(server.requests.dropFirst(3).map(\.path).sorted() == ["/s0", "/s2"])
                #expect(server.uploads["/s0"]?.body == FaultInjectingServer.body(size: 55_000, seed: 99))
                #expect(server.uploads["/s2"]?.body == files[2].bytes)
            }
        }
    }

    @Test func anUploadTheServerStopsReadingFailsAfterTheIdleTimeoutThoughALongerUploadMayTakeLonger() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([40_000_000, 7_000_000], in: folder)
                server.setUploadFaults([.stall(afterBytes: 1_000_000)], at: "/stalled")
                var configuration = TransferManager.Configuration.testing()
                // Long enough that a loaded machine (the whole suite runs at once) does not look stalled.
                configuration.idleTimeout = .seconds(4)
                configuration.connectTimeout = .seconds(1)
                configuration.retryPolicy.maximumAttempts = 1
                // 7 MB at 1 MB/s: seven seconds, longer than the connect and idle timeouts together.
                configuration.bandwidthLimit = 1_000_000
                let started = ContinuousClock.now
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.enqueue([
                        .upload(file: files[0].url, to: server.url("/stalled"), id: "stalled"),
                        .upload(file: files[1].url, to: server.url("/slow"), id: "slow"),
                    ]).report()
                }
                #expect(report.errors["stalled"]?.code == .timedOut)
                #expect(
                    report.completed.map(\.item.id) == ["slow"],
                    "\(report.errors["slow"].map(String.init(describing:)) ?? "")"
                )
                let uploadedWhole = server.uploads["/slow"]?.body == files[1].bytes
                #expect(uploadedWhole)
                #expect(ContinuousClock.now - started < .seconds(60))
            }
        }
    }

    @Test func aStoredUploadBatchIsContinuedByAnotherManagerWithoutSendingWhatWasUploaded() async throws {
        try await FaultInjectingServer.withServer { server in
            try await withTemporaryDirectory { folder in
                let files = try Self.makeFiles([30_000, 40_000, 50_000], in: folder)
                server.setUploadFaults([.status(403)], at: "/k1")
                var configuration = TransferManager.Configuration.testing()
                configuration.store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let first = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.enqueue(
                        files.enumerated().map {
                            .upload(file: $1.url, to: server.url("/k\($0)"), method: .multipart())
                        }
                    ).report()
                }
                #expect(first.completed.count == 2)
                let resumed = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.resumeStoredBatch(first.batchID).report()
                }
                #expect(resumed.isSuccess)
                #expect(resumed.items.count == 3)
                #expect(server.requests.dropFirst(3).map(\.path) == ["/k1"], "only the failed upload is sent again")
                #expect(server.uploads["/k1"]?.field == "file", "the method and field come back from the store")
                let sentAgain = server.uploads["/k1"]?.body == files[1].bytes
                #expect(sentAgain)
            }
        }
    }
}
