import Foundation
import Haul
import HaulTesting
import Testing

/// Plain-http downloads go over Haul's own keep-alive connections: these tests read, in the server's log, which
/// connection each request came on.
@Suite("Keeping plain-http connections alive", .timeLimit(.minutes(2)))
struct ConnectionReuseTests {
    static let body = FaultInjectingServer.body(size: 50_000, seed: 21)

    /// What a download of some paths did: its report, each request as "PATH@CONNECTION" in the order the server
    /// received them, the paths whose file (by its last component) was written, and whether it holds the body.
    struct Outcome {
        var report: BatchReport
        var trace: [String]
        var written: Set<String>
        var isWhole: [String: Bool]
    }

    /// Downloads `paths` from a server with `resources` in one batch, one transfer at a time and without retries
    /// (unless `configuration` says otherwise): what happens on the wire is the pool's.
    func download(
        _ paths: [String],
        from resources: [String: FaultInjectingServer.Resource],
        configuration: TransferManager.Configuration = Self.oneAtATimeWithoutRetries()
    ) async throws -> Outcome {
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download(paths.map { server.url($0) }, into: folder)
                }
                var isWhole: [String: Bool] = [:]
                var written: Set<String> = []
                for path in paths {
                    let file = folder.appending(path: String(path.split(separator: "/").last ?? ""))
                    if FileManager.default.fileExists(atPath: file.path) { written.insert(path) }
                    isWhole[path] = contents(of: file) == Self.body
                }
                return Outcome(
                    report: report,
                    trace: server.requests.map { "\($0.path)@\($0.connection)" },
                    written: written,
                    isWhole: isWhole
                )
            }
        }
    }

    static func oneAtATimeWithoutRetries() -> TransferManager.Configuration {
        var configuration = TransferManager.Configuration.testing(concurrent: 1)
        configuration.retryPolicy.maximumAttempts = 1
        return configuration
    }

    @Test func filesOneAfterAnotherUnderABandwidthLimitShareTheConnectionAndEachCompletesAtOnce() async throws {
        // The limit makes the last part of each body wait; a read the channel asked for meanwhile must still come,
        // or the next response on the connection is never read (the command hung after its first file).
        var configuration = Self.oneAtATimeWithoutRetries()
        configuration.bandwidthLimit = 4 * 1_048_576
        let paths = ["/a", "/b", "/c"]
        let resources = Dictionary(
            uniqueKeysWithValues: paths.map { ($0, FaultInjectingServer.Resource(body: Self.body)) }
        )
        let outcome = try await self.download(paths, from: resources, configuration: configuration)
        #expect(outcome.report.completed.count == 3, "\(outcome.report.failed.map(\.error.message))")
        #expect(outcome.trace == ["/a@1", "/b@1", "/c@1"])
        #expect(outcome.isWhole == ["/a": true, "/b": true, "/c": true])
    }

    @Test func aResponseFollowedByMoreThanItAnnouncedCompletesAndItsConnectionIsNotUsedAgain() async throws {
        let outcome = try await self.download(
            ["/a", "/b", "/c"],
            from: [
                "/a": .init(body: Self.body, faults: [.sendMoreThanAnnounced("junk after the body")]),
                "/b": .init(body: Self.body), "/c": .init(body: Self.body),
            ]
        )
        #expect(outcome.report.completed.count == 3, "\(outcome.report.failed.map(\.error.message))")
        #expect(outcome.isWhole == ["/a": true, "/b": true, "/c": true])
        // The bytes past a's length would have begun b's response on the same connection, and failed it.
        #expect(outcome.trace == ["/a@1", "/b@2", "/c@2"])
    }

    @Test func manyFilesFromOneHostShareAsManyConnectionsAsRunAtOnce() async throws {
        let paths = (0..<40).map { "/f\($0)" }
        let resources = Dictionary(
            uniqueKeysWithValues: paths.map { ($0, FaultInjectingServer.Resource(body: Self.body)) }
        )
        let outcome = try await self.download(paths, from: resources, configuration: .testing(concurrent: 4))
        #expect(outcome.report.completed.count == 40)
        let connections = Set(outcome.trace.map { $0.split(separator: "@").last! })
        #expect(connections.count <= 4, "40 requests came on \(connections.count) connections")
    }

    @Test func aKeptAliveConnectionTheServerDroppedIsReplacedWithoutCountingAnAttempt() async throws {
        let outcome = try await self.download(
            ["/a", "/b"],
            from: ["/a": .init(body: Self.body), "/b": .init(body: Self.body, faults: [.closeWithoutAnswer])]
        )
        #expect(outcome.report.completed.count == 2)
        #expect(outcome.report.items.map(\.attempts) == [1, 1])
        #expect(outcome.isWhole["/b"] == true, "b is the file the server serves")
        // /b's request went on /a's connection, which the server closed; sent again on a new one.
        #expect(outcome.trace == ["/a@1", "/b@1", "/b@2"])
    }

    @Test func aNewConnectionClosedWithoutAnAnswerFailsTheAttemptInsteadOfSendingAgain() async throws {
        let outcome = try await self.download(
            ["/b"],
            from: ["/b": .init(body: Self.body, faults: [.closeWithoutAnswer, .closeWithoutAnswer])]
        )
        #expect(outcome.report.failed.first?.error.code == .connectionFailed)
        #expect(outcome.trace == ["/b@1"])
    }

    @Test func aResponseThatClosesItsConnectionIsFollowedByANewConnection() async throws {
        let outcome = try await self.download(
            ["/a", "/b", "/c"],
            from: [
                "/a": .init(body: Self.body, faults: [.addHeaders(["Connection": "close"])]),
                "/b": .init(body: Self.body), "/c": .init(body: Self.body),
            ]
        )
        #expect(outcome.report.completed.count == 3)
        #expect(outcome.trace == ["/a@1", "/b@2", "/c@2"])
    }

    @Test func keepsNoMoreIdleConnectionsThanTransfersRunAtOnceClosingTheLongestIdle() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/x": .init(body: Self.body), "/z": .init(body: Self.body),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { first in
            try await FaultInjectingServer.withServer(host: "127.0.0.2", resources: ["/y": .init(body: Self.body)]) {
                second in
                try await withTemporaryDirectory { folder in
                    // One transfer at a time, so one idle connection: the second origin's, once it is given back,
                    // closes the first origin's, and the first origin's next file needs a new connection.
                    try await TransferManager.withTransferManager(configuration: Self.oneAtATimeWithoutRetries()) {
                        manager in
                        for url in [first.url("/x"), second.url("/y"), first.url("/z")] {
                            let report = try await manager.download([url], into: folder)
                            #expect(report.completed.count == 1)
                        }
                    }
                    let trace = first.requests.map { "\($0.path)@\($0.connection)" }
                    #expect(trace == ["/x@1", "/z@2"])
                }
            }
        }
    }

    @Test func aConnectionIdleFromTheSameOriginIsReusedAcrossBatches() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/x": .init(body: Self.body), "/z": .init(body: Self.body),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                try await TransferManager.withTransferManager(configuration: Self.oneAtATimeWithoutRetries()) {
                    manager in
                    for url in [server.url("/x"), server.url("/z")] {
                        let report = try await manager.download([url], into: folder)
                        #expect(report.completed.count == 1)
                    }
                }
                let trace = server.requests.map { "\($0.path)@\($0.connection)" }
                #expect(trace == ["/x@1", "/z@1"])
            }
        }
    }

    @Test func aShortErrorPageIsReadIntoTheMessageAndItsConnectionServesTheNextFile() async throws {
        let outcome = try await self.download(
            ["/a", "/b"],
            from: [
                "/a": .init(
                    body: Self.body,
                    faults: [.explainedStatus(503, "Down for maintenance until noon\nsecond line")]
                ),
                "/b": .init(body: Self.body),
            ]
        )
        let failure = try #require(outcome.report.failed.first?.error)
        #expect(failure.message == "The server answered 503 Service Unavailable: Down for maintenance until noon")
        #expect(failure.httpStatus == 503)
        #expect(outcome.report.completed.count == 1)
        #expect(outcome.written == ["/b"], "no error page saved")
        #expect(outcome.trace == ["/a@1", "/b@1"])
    }

    @Test func anErrorPageThatIsNotPlainTextIsReadButLeftOutOfTheMessage() async throws {
        let outcome = try await self.download(
            ["/a", "/b"],
            from: ["/a": .init(body: Self.body, faults: [.status(404)]), "/b": .init(body: Self.body)]
        )
        #expect(outcome.report.failed.first?.error.message == "The server answered 404 Not Found")
        #expect(outcome.report.completed.count == 1)
        #expect(outcome.trace == ["/a@1", "/b@1"])
    }

    @Test func sendsThePathAndQueryAsWrittenWithTheHostHeader() async throws {
        // The server finds a resource by the path as it arrives, escapes and all.
        try await FaultInjectingServer.withServer(resources: ["/a%20b/c": .init(body: Self.body)]) { server in
            try await withTemporaryDirectory { folder in
                let url = URL(string: "http://127.0.0.1:\(server.port)/a%20b/c?sig=x%2Fy&n=1")!
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download([url], into: folder)
                }
                #expect(report.completed.count == 1)
                let request = try #require(server.requests.first)
                #expect(request.path == "/a%20b/c?sig=x%2Fy&n=1")
                #expect(request.headers["host"] == "127.0.0.1:\(server.port)")
            }
        }
    }

    @Test func aHeaderValueThatWouldEndItsLineFailsItsItemAndNothingOfItReachesTheServer() async throws {
        try await FaultInjectingServer.withServer(resources: [
            "/a": .init(body: Self.body), "/b": .init(body: Self.body),
        ]) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.enqueue([
                        TransferRequest(
                            url: server.url("/a"),
                            destination: .folder(folder),
                            headers: [("X-Token", "1\r\nX-Injected: yes")]
                        ),
                        TransferRequest(
                            url: server.url("/b"),
                            destination: .folder(folder),
                            headers: [("X-Token", "2")]
                        ),
                    ]).report()
                }
                let failure = try #require(report.failed.first)
                #expect(failure.item.url.path == "/a")
                #expect(failure.error.code == .invalidRequest)
                #expect(failure.error.message == "The value of the header \"X-Token\" has a control character")
                #expect(report.completed.map(\.item.url.path) == ["/b"], "the next request on the connection goes out")
                #expect(server.requests.map(\.path) == ["/b"])
                #expect(server.requests.allSatisfy { $0.headers["x-injected"] == nil })
            }
        }
    }
}
