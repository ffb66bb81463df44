import Foundation
import Haul
import HaulTesting
import NIOConcurrencyHelpers
import Testing

@Suite("Hooks around each attempt", .timeLimit(.minutes(1)))
struct HooksTests {
    static let body = FaultInjectingServer.body(size: 200_000, seed: 21)

    /// A large body, and one short enough to be read as an error page would be: the hook's rejection is not the
    /// server's error, and keeps its own message either way.
    @Test(arguments: [200_000, 1_000])
    func aStatusHookThatRejects200FailsTheItemWithItsOwnMessageBeforeAnyByteIsWritten(size: Int) async throws {
        let body = FaultInjectingServer.body(size: size, seed: 21)
        try await FaultInjectingServer.withServer(resources: ["/file": .init(body: body)]) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.retrying()
                configuration.hooks.acceptsStatus = { _, status in status != 200 }
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download([server.url("/file")], into: folder)
                }
                let error = try #require(report.failed.first?.error)
                #expect(error.code == .httpStatus)
                #expect(error.message == "The status hook rejected status 200")
                #expect(error.httpStatus == 200)
                #expect(server.requests.count == 1, "a rejected status is not retried")
                #expect(names(in: folder).isEmpty)
            }
        }
    }

    @Test func aFileValidatorThatRejectsLeavesNothingAtTheFinalPath() async throws {
        try await FaultInjectingServer.withServer(resources: [
            "/good": .init(body: Self.body), "/bad": .init(body: [1, 2, 3]),
        ]) {
            server in
            try await withTemporaryDirectory { folder in
                let seen = NIOLockedValueBox<[String: [UInt8]]>([:])
                var configuration = TransferManager.Configuration.retrying()
                configuration.hooks.validatesFile = { id, path in
                    let bytes = [UInt8]((try? Data(contentsOf: path)) ?? Data())
                    seen.withLockedValue { $0[id.rawValue] = bytes }
                    return bytes.count > 3
                }
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download([server.url("/good"), server.url("/bad")], into: folder)
                }
                #expect(report.completed.map(\.item.url.path) == ["/good"])
                #expect(report.failed.first?.error.code == .validationFailed)
                #expect(names(in: folder) == ["good"])
                #expect(seen.withLockedValue { $0.values.contains(Self.body) }, "the validator sees the complete file")
            }
        }
    }

    @Test func theRequestProviderIsAskedAgainForEveryAttemptIncludingAResume() async throws {
        let resource = FaultInjectingServer.Resource(
            body: Self.body,
            chunkSize: 20_000,
            chunkDelay: .milliseconds(5),
            faults: [.closeConnection(afterBytes: 100_000)]
        )
        try await FaultInjectingServer.withServer(resources: ["/file": resource]) { server in
            try await withTemporaryDirectory { folder in
                let calls = NIOLockedValueBox<[Int]>([])
                var configuration = TransferManager.Configuration.retrying()
                configuration.hooks.prepareRequest = { _, attempt, url, headers in
                    calls.withLockedValue { $0.append(attempt) }
                    var signed = URLComponents(url: url, resolvingAgainstBaseURL: false)!
                    signed.queryItems = [URLQueryItem(name: "sig", value: "s\(attempt)")]
                    return (signed.url!, headers + [("Authorization", "Bearer t\(attempt)")])
                }
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download([server.url("/file")], into: folder)
                }
                #expect(report.completed.count == 1)
                #expect(contents(of: folder.appending(path: "file")) == Self.body)
                #expect(calls.withLockedValue { $0 } == [1, 2])
                let requests = server.requests
                #expect(requests.map(\.path) == ["/file?sig=s1", "/file?sig=s2"])
                #expect(requests.map { $0.headers["authorization"] } == ["Bearer t1", "Bearer t2"])
                #expect(requests[0].range == nil && requests[1].range != nil, "the second attempt resumes")
            }
        }
    }
}
