import Foundation
import Haul
import HaulTesting
import NIOConcurrencyHelpers
import Testing

/// Tests that measure time. They need the machine to themselves, so the parallel `swift test` skips them and
/// `.ci/run` runs them alone first: `HAUL_TIMING_TESTS=1 swift test --filter TimingTests`.
@Suite(
    "Timing",
    .timeLimit(.minutes(1)),
    .enabled(if: ProcessInfo.processInfo.environment["HAUL_TIMING_TESTS"] == "1", "set HAUL_TIMING_TESTS=1 to run")
)
struct TimingTests {
    @Test func aOneMebibytePerSecondLimitYieldsAboutThatRate() async throws {
        let body = FaultInjectingServer.body(size: 3 * 524_288, seed: 8)
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: body), "/b": .init(body: body)]) {
            server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                configuration.bandwidthLimit = 1_048_576
                let started = ContinuousClock.now
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    // Two files at once share the one limit.
                    try await manager.download([server.url("/a"), server.url("/b")], into: folder)
                }
                let seconds = (ContinuousClock.now - started).secondsValue
                #expect(report.completed.count == 2)
                let rate = Double(2 * body.count) / seconds / 1_048_576
                #expect((0.8...1.2).contains(rate), "\(rate) MiB/s over \(seconds) s")
            }
        }
    }

    @Test func aPerTransferLimitSlowsOnlyItsTransfer() async throws {
        let body = FaultInjectingServer.body(size: 3 * 262_144, seed: 9)
        try await FaultInjectingServer.withServer(resources: ["/slow": .init(body: body), "/fast": .init(body: body)]) {
            server in
            try await withTemporaryDirectory { folder in
                var slow = TransferRequest(url: server.url("/slow"), into: folder)
                slow.bandwidthLimit = 524_288
                let finished = NIOLockedValueBox<[String: ContinuousClock.Instant]>([:])
                let started = ContinuousClock.now
                try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    manager.addObserver { event in
                        if case .finished = event.kind { finished.withLockedValue { $0[event.url.path] = .now } }
                    }
                    _ = try await manager.enqueue([slow, TransferRequest(url: server.url("/fast"), into: folder)])
                        .report()
                }
                let times = finished.withLockedValue { $0 }
                let slowSeconds = try #require(times["/slow"].map { ($0 - started).secondsValue })
                let fastSeconds = try #require(times["/fast"].map { ($0 - started).secondsValue })
                let rate = Double(body.count) / slowSeconds / 524_288
                #expect((0.8...1.2).contains(rate), "\(rate) × the limit over \(slowSeconds) s")
                #expect(fastSeconds < slowSeconds / 3, "the other transfer is not held back")
            }
        }
    }
}

extension Duration {
    var secondsValue: Double { Double(self.components.seconds) + Double(self.components.attoseconds) / 1e18 }
}
