import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Priorities", .timeLimit(.minutes(2)))
struct PriorityTests {
    @Test func underOneAtATimeHigherPrioritiesStartFirstAndAPriorityCanChangeWhileTheQueueRuns() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [
            // About a second for the first file, so the queue behind it is still waiting when the priority changes.
            "/first": .init(
                body: FaultInjectingServer.body(size: 100_000, seed: 1),
                chunkSize: 5_000,
                chunkDelay: .milliseconds(50)
            )
        ]
        for name in ["low", "high1", "normal", "high2"] { resources["/\(name)"] = .init(body: [1, 2, 3]) }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                func request(_ name: String, _ priority: Int) -> TransferRequest {
                    var request = TransferRequest(url: server.url("/\(name)"), into: folder)
                    request.priority = priority
                    return request
                }
                let report = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 1)) {
                    manager in
                    let normal = request("normal", 0)
                    let batch = try manager.enqueue([
                        request("first", 0), request("low", -5), request("high1", 5), normal, request("high2", 5),
                    ])
                    manager.setPriority(10, of: normal.id)
                    return await batch.report()
                }
                #expect(report.isSuccess)
                #expect(server.requests.map(\.path) == ["/first", "/normal", "/high1", "/high2", "/low"])
            }
        }
    }
}
