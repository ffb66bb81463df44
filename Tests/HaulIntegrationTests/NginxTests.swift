import Foundation
import Haul
import HaulTesting
import Testing

@Suite(
    "Against a real nginx",
    .timeLimit(.minutes(2)),
    .enabled(if: NginxServer.executable != nil, "nginx is not installed")
)
struct NginxTests {
    @Test func downloadsABatchOfMixedSizesByteForByte() async throws {
        try await NginxServer.withServer { nginx in
            let sizes = [0, 1, 4_096, 100_000, 1_048_576, 3_000_001]
            for (index, size) in sizes.enumerated() {
                try Data(FaultInjectingServer.body(size: size, seed: UInt64(index))).write(
                    to: nginx.root.appending(path: "f\(index).bin")
                )
            }
            try await withTemporaryDirectory { folder in
                let urls = sizes.indices.map { nginx.url("/f\($0).bin") } + [nginx.url("/missing.bin")]
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download(urls, into: folder)
                }
                #expect(report.completed.count == sizes.count)
                #expect(report.failed.map(\.error.httpStatus) == [404])
                for (index, size) in sizes.enumerated() {
                    #expect(
                        contents(of: folder.appending(path: "f\(index).bin"))
                            == FaultInjectingServer.body(size: size, seed: UInt64(index))
                    )
                }
            }
        }
    }

    @Test func resumesAPausedDownloadWithNginxsETagAsTheValidator() async throws {
        // Slow for the first request (10 s for the file, so a loaded machine cannot finish it before the pause),
        // full speed for the resumed range request.
        let config = #"set $limit_rate 100k; if ($http_range) { set $limit_rate 0; }"#
        try await NginxServer.withServer(extraLocationConfig: config) { nginx in
            let body = FaultInjectingServer.body(size: 1_000_000, seed: 77)
            try Data(body).write(to: nginx.root.appending(path: "slow.bin"))
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    let batch = try manager.enqueue(TransferRequest(url: nginx.url("/slow.bin"), into: folder))
                    var id: TransferID?
                    for await event in batch.events {
                        if case .transfer(let transfer) = event, case .progressed(let progress) = transfer.kind,
                            progress.receivedBytes > 100_000
                        {
                            id = transfer.id
                            break
                        }
                    }
                    let transferID = try #require(id)
                    manager.pause(transferID)
                    for await event in batch.events {
                        if case .transfer(let transfer) = event, case .paused = transfer.kind { break }
                    }
                    manager.resume(transferID)
                    var resumedAt: Int64 = 0
                    for await event in batch.events {
                        if case .transfer(let transfer) = event, case .started(let offset) = transfer.kind {
                            resumedAt = offset
                        }
                    }
                    #expect(resumedAt > 100_000)
                    return await batch.report()
                }
                #expect(report.completed.count == 1)
                #expect(contents(of: folder.appending(path: "slow.bin")) == body)
            }
        }
    }

    static let webDAV = "dav_methods PUT DELETE; create_full_put_path on; client_max_body_size 0;"

    @Test func uploadsFiftyFilesOfMixedSizesToWebDAVThenDeletesThemAndReportsExactlyTheMissingOnes() async throws {
        try await NginxServer.withServer(extraLocationConfig: Self.webDAV) { nginx in
            try await withTemporaryDirectory { folder in
                let sizes = (0..<50).map { [0, 1, 1_000, 65_536, 262_145, 1_048_576, 2_500_000][$0 % 7] + $0 }
                var files: [URL] = []
                for (index, size) in sizes.enumerated() {
                    let file = folder.appending(path: "u\(index).bin")
                    try Data(FaultInjectingServer.body(size: size, seed: UInt64(index + 100))).write(to: file)
                    files.append(file)
                }
                let uploaded = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue(
                        files.enumerated().map { .upload(file: $1, to: nginx.url("/incoming/sub/u\($0).bin")) }
                    ).report()
                }
                #expect(uploaded.isSuccess)
                #expect(uploaded.completed.count == 50)
                for (index, size) in sizes.enumerated() {
                    let onServer = contents(of: nginx.root.appending(path: "incoming/sub/u\(index).bin"))
                    #expect(onServer == FaultInjectingServer.body(size: size, seed: UInt64(index + 100)), "u\(index)")
                }

                let targets = (0..<50).map { nginx.url("/incoming/sub/u\($0).bin") }
                let missing = (0..<5).map { nginx.url("/incoming/sub/never\($0).bin") }
                let deleted = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue((targets + missing).map { .delete($0) }).report()
                }
                #expect(deleted.completed.count == 50)
                #expect(deleted.failed.map(\.item.url) == missing)
                #expect(deleted.failed.allSatisfy { $0.error.code == .notFound })
                #expect(names(in: nginx.root.appending(path: "incoming/sub")) == [])
            }
        }
    }
}
