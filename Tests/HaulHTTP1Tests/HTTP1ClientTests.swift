import HaulTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing

@testable import HaulHTTP1

/// A consumer that keeps what arrives, and can hold the connection's reads for a while after the first body part.
final class CollectingConsumer: HTTP1ResponseConsumer {
    private let state = NIOLockedValueBox<(head: HTTPResponseHead?, body: [UInt8], error: (any Error)?)>(
        (nil, [], nil)
    )
    let eventLoop: any EventLoop
    let waitAfterFirstPart: TimeAmount?

    init(eventLoop: any EventLoop, waitAfterFirstPart: TimeAmount? = nil) {
        self.eventLoop = eventLoop
        self.waitAfterFirstPart = waitAfterFirstPart
    }

    var body: [UInt8] { self.state.withLockedValue { $0.body } }
    var error: (any Error)? { self.state.withLockedValue { $0.error } }

    func headReceived(_ head: HTTPResponseHead) { self.state.withLockedValue { $0.head = head } }

    func bodyPartReceived(_ buffer: ByteBuffer) -> EventLoopFuture<Void>? {
        let isFirst = self.state.withLockedValue { state in
            defer { state.body += buffer.readableBytesView }
            return state.body.isEmpty
        }
        guard isFirst, let wait = self.waitAfterFirstPart else { return nil }
        return self.eventLoop.scheduleTask(in: wait) {}.futureResult
    }

    func failed(_ error: any Error) { self.state.withLockedValue { $0.error = error } }
}

@Suite("The keep-alive HTTP/1.1 client", .timeLimit(.minutes(1)))
struct HTTP1ClientTests {
    func client(idleTimeout: TimeAmount = .seconds(5)) -> HTTP1Client {
        var configuration = HTTP1Client.Configuration()
        configuration.idleTimeout = idleTimeout
        return HTTP1Client(group: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
    }

    func get(_ path: String, from server: FaultInjectingServer) -> (HTTPRequestHead, HTTP1Client.Endpoint) {
        let head = HTTPRequestHead(
            version: .http1_1,
            method: .GET,
            uri: path,
            headers: ["Host": "\(server.host):\(server.port)"]
        )
        return (head, HTTP1Client.Endpoint(host: server.host, port: server.port))
    }

    @Test func getsAResponsesHeadBodyAndEndAndReusesTheConnection() async throws {
        let body = FaultInjectingServer.body(size: 300_000, seed: 1)
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: body)]) { server in
            let client = self.client()
            defer { client.shutDown() }
            for _ in 0..<3 {
                let (request, endpoint) = self.get("/a", from: server)
                let (head, exchange, consumer) = try await client.execute(request, on: endpoint) {
                    CollectingConsumer(eventLoop: $0)
                }
                #expect(head.status == .ok)
                try await exchange.waitForEnd()
                #expect(consumer.body == body)
            }
            #expect(Set(server.requests.map(\.connection)).count == 1, "one kept-alive connection")
        }
    }

    @Test func theConsumersOwnWaitsAreNotCountedAsTheServersSilence() async throws {
        // The reads held for 7 s after the first part, against a 3 s timeout.
        let body = FaultInjectingServer.body(size: 40_000, seed: 2)
        let resource = FaultInjectingServer.Resource(body: body, chunkSize: 10_000)
        try await FaultInjectingServer.withServer(resources: ["/slow": resource]) { server in
            let client = self.client(idleTimeout: .seconds(3))
            defer { client.shutDown() }
            let (request, endpoint) = self.get("/slow", from: server)
            let (_, exchange, consumer) = try await client.execute(request, on: endpoint) {
                CollectingConsumer(eventLoop: $0, waitAfterFirstPart: .seconds(7))
            }
            try await exchange.waitForEnd()
            #expect(consumer.body == body)
        }
    }

    @Test func aServerThatFallsSilentMidBodyTimesOut() async throws {
        let body = FaultInjectingServer.body(size: 200_000, seed: 3)
        let resource = FaultInjectingServer.Resource(body: body, faults: [.stall(afterBytes: 50_000)])
        try await FaultInjectingServer.withServer(resources: ["/stall": resource]) { server in
            let client = self.client(idleTimeout: .seconds(2))
            defer { client.shutDown() }
            let (request, endpoint) = self.get("/stall", from: server)
            let (_, exchange, consumer) = try await client.execute(request, on: endpoint) {
                CollectingConsumer(eventLoop: $0)
            }
            let error = await #expect(throws: HTTP1ClientError.self) { try await exchange.waitForEnd() }
            #expect(error?.code == .readTimeout)
            #expect((consumer.error as? HTTP1ClientError)?.code == .readTimeout)
        }
    }

    @Test func aRefusedConnectionFailsWithSwiftNIOsError() async throws {
        try await FaultInjectingServer.withRefusingPort { port in
            let client = self.client()
            defer { client.shutDown() }
            let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/", headers: ["Host": "127.0.0.1"])
            await #expect(throws: (any Error).self) {
                _ = try await client.execute(head, on: .init(host: "127.0.0.1", port: port)) {
                    CollectingConsumer(eventLoop: $0)
                }
            }
        }
    }
}
