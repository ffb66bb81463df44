import Foundation
import Haul
import HaulTesting
import NIOConcurrencyHelpers
import Testing

@Suite("Observers, delegates and closures", .timeLimit(.minutes(2)))
struct ObserverTests {
    /// Collects what an observer is called with.
    final class Recorder: Sendable {
        let events = NIOLockedValueBox<[TransferEvent]>([])
        func record(_ event: TransferEvent) { self.events.withLockedValue { $0.append(event) } }
        var kinds: [String] { self.events.withLockedValue { $0.map { Self.name($0.kind) } } }

        static func name(_ kind: TransferEvent.Kind) -> String {
            switch kind {
            case .queued: "queued"
            case .started: "started"
            case .progressed: "progressed"
            case .paused: "paused"
            case .resumed: "resumed"
            case .retrying: "retrying"
            case .restarted: "restarted"
            case .finished(let result): "finished:\(result.state)"
            }
        }
    }

    static let body = FaultInjectingServer.body(size: 600_000, seed: 5)

    @Test func anObserverSeesEveryEventOfEveryTransferInOrderExactlyOnceAndCanBeRemoved() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/a": .init(body: Self.body, chunkSize: 50_000, chunkDelay: .milliseconds(2)),
            "/b": .init(body: Self.body, faults: [.status(503)]),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let everything = Recorder()
                let removed = Recorder()
                var configuration = TransferManager.Configuration.testing()
                configuration.retryPolicy.baseDelay = .milliseconds(10)
                let streamed = try await TransferManager.withTransferManager(configuration: configuration) {
                    manager in
                    manager.addObserver { everything.record($0) }
                    let token = manager.addObserver { removed.record($0) }
                    manager.removeObserver(token)
                    let (_, events) = try manager.enqueueWithEvents([
                        TransferRequest(url: server.url("/a"), into: folder),
                        TransferRequest(url: server.url("/b"), into: folder),
                        TransferRequest(url: server.url("/missing"), into: folder),
                    ])
                    var streamed: [TransferEvent] = []
                    for await event in events { if case .transfer(let e) = event { streamed.append(e) } }
                    return streamed
                }
                // Delivered before the scope returned: compare transfer by transfer with the batch's own stream.
                #expect(removed.kinds.isEmpty)
                let seen = everything.events.withLockedValue { $0 }
                for id in Set(streamed.map(\.id)) {
                    let expected = streamed.filter { $0.id == id }.map { Recorder.name($0.kind) }
                    let got = seen.filter { $0.id == id }.map { Recorder.name($0.kind) }
                    #expect(got.filter { $0 != "progressed" } == expected.filter { $0 != "progressed" })
                    #expect(got.first == "queued")
                    #expect(got.last?.hasPrefix("finished") == true)
                }
                #expect(everything.kinds.filter { $0 == "retrying" }.count == 1)
                #expect(everything.kinds.filter { $0.hasPrefix("finished") }.count == 3)
            }
        }
    }

    @Test func aSlowObserverDoesNotHoldUpTheTransferAndStillGetsEveryLifecycleEvent() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/a": .init(body: Self.body, chunkSize: 20_000, chunkDelay: .milliseconds(1))
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let recorder = Recorder()
                let (gate, open) = AsyncStream<Void>.makeStream()
                var configuration = TransferManager.Configuration.testing()
                // The request waits until the observer is stuck on its first event.
                configuration.hooks.prepareRequest = { _, _, url, headers in
                    while recorder.kinds.isEmpty { try? await Task.sleep(for: .milliseconds(1)) }
                    return (url, headers)
                }
                try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    // The observer is stuck on its first event until the transfer has finished: if observers could
                    // slow transfers, this would never finish.
                    manager.addObserver { event in
                        recorder.record(event)
                        if recorder.kinds.count == 1 { for await _ in gate { break } }
                    }
                    let report = try await manager.enqueue(TransferRequest(url: server.url("/a"), into: folder))
                        .report()
                    #expect(report.isSuccess)
                    #expect(recorder.kinds == ["queued"])
                    open.yield()
                    open.finish()
                }
                let kinds = recorder.kinds
                #expect(kinds.first == "queued")
                #expect(kinds.last == "finished:completed")
                #expect(kinds.contains("started"))
                #expect(
                    kinds.filter { $0 == "progressed" }.count <= 2,
                    "progress coalesced while the observer was stuck"
                )
            }
        }
    }

    @Test func closuresGivenAtSubmissionHearProgressAndExactlyOneEnd() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: Self.body)]) { server in
            try await withTemporaryDirectory { folder in
                let progress = NIOLockedValueBox<[Int64]>([])
                let ends = NIOLockedValueBox<[String]>([])
                try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    for path in ["/a", "/missing"] {
                        try manager.enqueue(
                            TransferRequest(url: server.url(path), into: folder),
                            onProgress: { p in
                                if path == "/a" { progress.withLockedValue { $0.append(p.receivedBytes) } }
                            },
                            onSuccess: { file in ends.withLockedValue { $0.append("success \(file.byteCount)") } },
                            onFailure: { error in ends.withLockedValue { $0.append("failure \(error.httpStatus ?? 0)") }
                            }
                        )
                    }
                    while manager.isActive { try await Task.sleep(for: .milliseconds(10)) }
                }
                #expect(ends.withLockedValue { $0.sorted() } == ["failure 404", "success \(Self.body.count)"])
                let values = progress.withLockedValue { $0 }
                #expect(values == values.sorted())
                #expect(values.last == Int64(Self.body.count))
            }
        }
    }

    actor Delegate: TransferDelegate {
        var calls: [String] = []
        func transferDidStart(_ id: TransferID, url: URL, offset: Int64) { self.calls.append("start \(url.path)") }
        func transferDidComplete(_ id: TransferID, url: URL, file: CompletedFile) {
            self.calls.append("complete \(url.path) \(file.byteCount)")
        }
        func transferDidFail(_ id: TransferID, url: URL, error: HaulError) {
            self.calls.append("fail \(url.path) \(error.code)")
        }
    }

    @Test func aDelegateForOneTransferHearsOnlyThatTransfer() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: Self.body)]) { server in
            try await withTemporaryDirectory { folder in
                let delegate = Delegate()
                let failing = TransferRequest(url: server.url("/missing"), into: folder)
                try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    manager.addDelegate(delegate, for: failing.id)
                    _ = try await manager.enqueue([TransferRequest(url: server.url("/a"), into: folder), failing])
                        .report()
                }
                #expect(await delegate.calls == ["start /missing", "fail /missing httpStatus"])
            }
        }
    }
}
