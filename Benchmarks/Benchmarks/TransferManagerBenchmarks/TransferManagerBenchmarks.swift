import Benchmark
import Foundation
import Haul
import HaulTesting

/// What a batch costs through the public API, against the in-process test server on loopback.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .peakMemoryResident],
        warmupIterations: 1,
        maxDuration: .seconds(5),
        maxIterations: 50
    )

    Benchmark("200 files of 16 KiB, no store") { benchmark in
        try await downloadSmallFiles(benchmark, count: 200, withStore: false)
    }

    Benchmark("200 files of 16 KiB, with a store") { benchmark in
        try await downloadSmallFiles(benchmark, count: 200, withStore: true)
    }

    Benchmark("One file of 64 MiB") { benchmark in
        let body = FaultInjectingServer.body(size: 64 << 20, seed: 1)
        let resources = ["/large.bin": FaultInjectingServer.Resource(body: body, chunkSize: 256 * 1024)]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            for _ in benchmark.scaledIterations {
                let folder = try temporaryFolder()
                defer { try? FileManager.default.removeItem(at: folder) }
                benchmark.startMeasurement()
                let report = try await TransferManager.withTransferManager { manager in
                    try await manager.download([server.url("/large.bin")], into: folder)
                }
                benchmark.stopMeasurement()
                precondition(report.failed.isEmpty, "The download failed")
            }
        }
    }
}

/// Downloads `count` files of 16 KiB per iteration into a new folder, measuring the manager's whole scope.
private func downloadSmallFiles(_ benchmark: Benchmark, count: Int, withStore: Bool) async throws {
    var resources: [String: FaultInjectingServer.Resource] = [:]
    for index in 0..<count {
        resources["/f\(index).bin"] = FaultInjectingServer.Resource(
            body: FaultInjectingServer.body(size: 16 * 1024, seed: UInt64(index))
        )
    }
    try await FaultInjectingServer.withServer(resources: resources) { server in
        let urls = (0..<count).map { server.url("/f\($0).bin") }
        for _ in benchmark.scaledIterations {
            let folder = try temporaryFolder()
            defer { try? FileManager.default.removeItem(at: folder) }
            var configuration = TransferManager.Configuration()
            configuration.maximumConcurrentTransfers = 16
            if withStore {
                configuration.store = try TransferStore(path: folder.appending(path: "state.sqlite"))
            }
            benchmark.startMeasurement()
            let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                try await manager.download(urls, into: folder)
            }
            benchmark.stopMeasurement()
            precondition(report.failed.isEmpty, "\(report.failed.count) downloads failed")
        }
    }
}

private func temporaryFolder() throws -> URL {
    let folder = FileManager.default.temporaryDirectory.appending(path: "haul-bench-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    return folder
}
