import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Feeding long lists a window at a time", .timeLimit(.minutes(2)))
struct LongListTests {
    static let body = FaultInjectingServer.body(size: 20_000, seed: 21)

    @Test func aProducerThatWaitsForRoomKeepsAtMostItsWindowUnfinishedAndLosesNothing() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for index in 0..<40 {
            resources["/\(index)"] = .init(body: Self.body, chunkSize: 5_000, chunkDelay: .milliseconds(2))
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let outcome = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 2)) {
                    manager in
                    try await Self.feed(40, from: server, into: folder, window: 6, manager: manager)
                }
                #expect(outcome.mostUnfinished <= 6)
                #expect(outcome.report.items.count == 40)
                #expect(outcome.report.tally.completed == 40)
                #expect(outcome.report.tally.completedBytes == Int64(40 * Self.body.count))
                #expect(outcome.states.allSatisfy { $0 == .completed })
                for item in outcome.report.items {
                    guard case .completed(let file) = item.result else { continue }
                    let matches = (try? Data(contentsOf: file.path)) == Data(Self.body)
                    #expect(matches, "\(file.path.lastPathComponent) holds the served bytes")
                }
            }
        }
    }

    struct FeedOutcome {
        var report: BatchReport
        var mostUnfinished: Int
        var states: [TransferState?]
    }

    /// Adds `count` items, waiting for room whenever `window` are unfinished (down to half of it).
    static func feed(
        _ count: Int,
        from server: FaultInjectingServer,
        into folder: URL,
        window: Int,
        manager: TransferManager
    ) async throws -> FeedOutcome {
        let batch = try manager.makeBatch()
        batch.expectItems(count)
        var mostUnfinished = 0
        for index in 0..<count {
            if batch.unfinishedCount >= window { await batch.waitUntilUnfinished(atMost: window / 2) }
            try batch.add(TransferRequest(url: server.url("/\(index)"), into: folder))
            mostUnfinished = max(mostUnfinished, batch.unfinishedCount)
        }
        batch.seal()
        let report = await batch.report()
        // Finished transfers are kept compact, and still answered by identifier.
        let states = report.items.map { manager.state(of: $0.id) }
        return FeedOutcome(report: report, mostUnfinished: mostUnfinished, states: states)
    }

    @Test func waitingForRoomEndsWhenTheBatchIsStopped() async throws {
        let stalled = FaultInjectingServer.Resource(
            body: Self.body,
            faults: Array(repeating: .stall(afterBytes: 1_000), count: 5)
        )
        try await FaultInjectingServer.withServer(resources: ["/a": stalled, "/b": stalled]) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let batch = try manager.makeBatch()
                    try batch.add(TransferRequest(url: server.url("/a"), into: folder))
                    try batch.add(TransferRequest(url: server.url("/b"), into: folder))
                    async let waited: Void = batch.waitUntilUnfinished(atMost: 0)
                    try await Task.sleep(for: .milliseconds(100))
                    manager.stopAll()
                    await waited
                    #expect(throws: HaulError.self, "a stopped batch takes no more items") {
                        try batch.add(TransferRequest(url: server.url("/a"), into: folder))
                    }
                    return await batch.report()
                }
                #expect(report.tally.cancelled == 2)
            }
        }
    }

    @Test func theStoreKnowsABatchStoppedBeforeItsListWasSealedHoldsOnlyPartOfIt() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: Self.body)]) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                configuration.store = store
                let (open, sealed) = try await TransferManager.withTransferManager(configuration: configuration) {
                    manager in
                    let open = try manager.makeBatch()
                    try open.add(TransferRequest(url: server.url("/a"), destination: .folder(folder), id: "first"))
                    let sealed = try manager.makeBatch()
                    try sealed.add(TransferRequest(url: server.url("/a"), destination: .folder(folder), id: "first"))
                    sealed.seal()
                    _ = await sealed.report()
                    return (open.id, sealed.id)
                }
                let batches = try store.batches()
                let openBatch = try #require(batches.first { $0.id == open })
                let sealedBatch = try #require(batches.first { $0.id == sealed })
                #expect(openBatch.isListComplete == false)
                #expect(openBatch.isFinished == false, "its one transfer completed, but the list was not all there")
                #expect(sealedBatch.isListComplete)
                #expect(sealedBatch.isFinished)
                #expect(try store.unfinishedBatches().map(\.id) == [open])
            }
        }
    }
}
