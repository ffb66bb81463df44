import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Handing events over in bursts", .timeLimit(.minutes(2)))
struct EventDeliveryTests {
    /// Zero hands each event over as it happens; 30 s would hold them past the test's end unless a batch's end (or
    /// the scope's) handed them over.
    static let intervals: [Duration] = [.zero, .seconds(30)]

    @Test(arguments: intervals)
    func aBatchsStreamGetsEveryEventInOrderBeforeItsReport(interval: Duration) async throws {
        let resources = Dictionary(
            uniqueKeysWithValues: (0..<5).map { index in
                (
                    "/f\(index)",
                    FaultInjectingServer.Resource(
                        body: FaultInjectingServer.body(size: 50_000 + index, seed: UInt64(index))
                    )
                )
            }
        )
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                configuration.eventDeliveryInterval = interval
                let started = ContinuousClock.now
                let events = try await TransferManager.batchEvents(
                    .all,
                    downloading: (0..<5).map { server.url("/f\($0)") },
                    into: folder,
                    configuration: configuration
                )
                #expect(ContinuousClock.now - started < .seconds(20), "the batch's end handed its events over")
                var kinds: [String: [String]] = [:]
                for case .transfer(let event) in events {
                    switch event.kind {
                    case .started: kinds[event.url.path, default: []].append("started")
                    case .finished(let result): kinds[event.url.path, default: []].append("\(result.state)")
                    default: break
                    }
                }
                #expect(
                    kinds == Dictionary(uniqueKeysWithValues: (0..<5).map { ("/f\($0)", ["started", "completed"]) })
                )
                guard case .finished(let report) = events.last else {
                    Issue.record("the stream does not end with the batch's report")
                    return
                }
                #expect(report.completed.count == 5)
                let progress = events.indices.compactMap { index in
                    if case .progressed(let progress) = events[index] { (index, progress) } else { nil }
                }
                if interval > .zero {
                    // Held until the end: the latest snapshot took the place of the others.
                    #expect(progress.count == 1)
                    #expect(progress.first?.0 == events.count - 2, "right before the end")
                    #expect(progress.first?.1.completedFiles == 5)
                } else {
                    #expect(progress.count >= 5, "one at least as each file completed")
                }
            }
        }
    }

    @Test func aLifecycleStreamLeavesOutQueueingAndEachFilesProgress() async throws {
        let events = try await TransferManager.batchEventsOfTwoSlowFilesAndAMissingOne(.lifecycle)
        var kinds: [String: [String]] = [:]
        var batchProgress = 0
        for event in events {
            switch event {
            case .transfer(let transfer):
                let kind =
                    switch transfer.kind {
                    case .queued: "queued"
                    case .started: "started"
                    case .progressed: "progressed"
                    case .finished(let result): "\(result.state)"
                    default: "other"
                    }
                kinds[transfer.url.path, default: []].append(kind)
            case .progressed: batchProgress += 1
            case .finished: break
            }
        }
        #expect(
            kinds == [
                "/a": ["started", "completed"], "/missing": ["started", "failed"],
                "/b": ["started", "completed"],
            ]
        )
        #expect(batchProgress >= 1, "the batch's progress is carried")
    }

    @Test(arguments: intervals)
    func theManagersStreamGetsEveryEventBeforeTheScopeEnds(interval: Duration) async throws {
        let body = FaultInjectingServer.body(size: 20_000, seed: 1)
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: body), "/b": .init(body: body)]) {
            server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                configuration.eventDeliveryInterval = interval
                let finished = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    let stream = manager.events()
                    let reader = Task {
                        var finished: [String] = []
                        for await event in stream {
                            if case .finished = event.kind { finished.append(event.url.path) }
                        }
                        return finished
                    }
                    _ = try await manager.download([server.url("/a"), server.url("/b")], into: folder)
                    return reader
                }
                #expect(await finished.value.sorted() == ["/a", "/b"])
            }
        }
    }

    @Test func heldEventsArriveAfterTheIntervalWhileTheBatchRuns() async throws {
        // The body stalls after its first kilobyte: the transfer runs until the test cancels it.
        let stalled = FaultInjectingServer.Resource(
            body: FaultInjectingServer.body(size: 2_000, seed: 2),
            faults: [.stall(afterBytes: 1_000)]
        )
        try await FaultInjectingServer.withServer(resources: ["/stalled": stalled]) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                configuration.eventDeliveryInterval = .milliseconds(200)
                configuration.idleTimeout = .seconds(100)
                try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    let batch = try manager.makeBatch()
                    let stream = batch.events(.all)
                    let added = ContinuousClock.now
                    try batch.add(TransferRequest(url: server.url("/stalled"), into: folder))
                    batch.seal()
                    var iterator = stream.makeAsyncIterator()
                    let first = await iterator.next()
                    #expect(ContinuousClock.now - added >= .milliseconds(190), "held for the interval")
                    #expect(manager.isActive, "handed over by the clock, not by the batch's end")
                    guard case .transfer(let event) = first else {
                        Issue.record("the first event is not a transfer's: \(String(describing: first))")
                        return
                    }
                    #expect(event.url.path == "/stalled")
                    batch.cancel()
                    while await iterator.next() != nil {}
                }
            }
        }
    }
}
