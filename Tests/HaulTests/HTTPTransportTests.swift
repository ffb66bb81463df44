import AsyncHTTPClient
import Foundation
import HaulHTTP1
import HaulTesting
import NIOCore
import NIOHTTP1
import Testing

@testable import Haul

@Suite("Reading responses in large pieces")
struct ReadSizeTests {
    @Test func givesEachTransferUpToOneMebibyteWithinTheBudget() {
        #expect(HTTPTransport.maximumReadSize(concurrency: 1) == 1024 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 16) == 1024 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 32) == 1024 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 48) == 512 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 64) == 512 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 256) == 128 * 1024)
    }

    @Test func givesHaulsOwnConnectionsAQuarterOfThat() {
        let limit = PlainHTTPTransport.readSizeLimit
        #expect(limit == 256 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 16, limit: limit) == 256 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 128, limit: limit) == 256 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 256, limit: limit) == 128 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 1024, limit: limit) == 64 * 1024)
    }

    @Test func neverGoesBelowSwiftNIOsDefaultRead() {
        #expect(HTTPTransport.maximumReadSize(concurrency: 1024) == 64 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 1_000_000) == 64 * 1024)
        #expect(HTTPTransport.maximumReadSize(concurrency: 0) == 1024 * 1024)
    }

    @Test func aFastBodyArrivesInPiecesLargerThanSwiftNIOsDefaultRead() async throws {
        let body = FaultInjectingServer.body(size: 8 * 1024 * 1024, seed: 7)
        let resource = FaultInjectingServer.Resource(body: body, chunkSize: 1024 * 1024)
        try await FaultInjectingServer.withServer(resources: ["/big": resource]) { server in
            var configuration = TransferManager.Configuration()
            configuration.maximumConcurrentTransfers = 16
            let client = try HTTPTransport.makeClient(configuration)
            let transport = HTTPTransport(client: client, configuration: configuration)
            var largest = 0
            var received = 0
            do {
                let response = try await transport.send(.GET, server.url("/big"), headers: [], body: nil)
                // Let the server fill the socket's buffer, so that reads can fill theirs.
                try await Task.sleep(for: .milliseconds(100))
                for try await chunk in response.body {
                    largest = max(largest, chunk.readableBytes)
                    received += chunk.readableBytes
                }
            } catch {
                try await transport.shutDown()
                throw error
            }
            try await transport.shutDown()
            #expect(received == body.count)
            #expect(largest > 64 * 1024)
            #expect(largest <= 1024 * 1024)
        }
    }
}

@Suite("A download's body written on its event loop")
struct ResponseStreamTests {
    static let body = FaultInjectingServer.body(size: 3_000_000, seed: 9)

    /// A plan for a body written to `path`, with no limits.
    func plan(writingTo path: String) -> Download.Plan {
        let url = URL(filePath: path)
        return Download.Plan(
            Download.Plan.Fixed(
                id: TransferID("stream-test"),
                operation: .download,
                url: URL(string: "http://127.0.0.1/")!,
                headers: [],
                folder: url.deletingLastPathComponent(),
                folderPath: url.deletingLastPathComponent().path,
                usesContentDisposition: false,
                conflictPolicy: .overwrite,
                expectedByteCount: nil,
                checksum: nil,
                computesSHA256: false,
                synchronizesFiles: false,
                progress: ProgressCell(0),
                maximumFileSize: nil,
                lowSpeedLimit: nil,
                idleTimeout: .seconds(10),
                bandwidth: BandwidthLimiter(bytesPerSecond: nil),
                transferBandwidth: nil,
                hooks: TransferManager.Hooks(),
                attempt: 1
            ),
            nameComponents: [url.lastPathComponent],
            validator: nil
        )
    }

    /// Starts a GET of `resource`, waits `delay` before giving the body a writer, and returns what the file holds
    /// and the error that ended the body, if any.
    func receive(
        _ resource: FaultInjectingServer.Resource,
        attachingAfter delay: Duration
    ) async throws -> (file: [UInt8], error: (any Error)?) {
        try await FaultInjectingServer.withServer(resources: ["/f": resource]) { server in
            let configuration = TransferManager.Configuration()
            let client = try HTTPTransport.makeClient(configuration)
            let transport = HTTPTransport(client: client, configuration: configuration)
            let path = FileManager.default.temporaryDirectory.appending(path: "haul-stream-\(UUID().uuidString)").path
            defer { PartialFile.remove(path) }
            var failure: (any Error)?
            do {
                let response = try await transport.stream(server.url("/f"), headers: [])
                try await Task.sleep(for: delay)
                let writer = BodyWriter(
                    file: try PartialFile(openingAt: path),
                    checksumDigester: nil,
                    sha256Digester: nil,
                    expectedBytes: nil,
                    status: Int(response.head.status.code),
                    plan: self.plan(writingTo: path)
                )
                do {
                    try await response.receive(into: writer)
                } catch {
                    failure = error
                }
                try writer.flush()
                writer.close()
            } catch {
                try await transport.shutDown()
                throw error
            }
            try await transport.shutDown()
            let file = (try? Data(contentsOf: URL(filePath: path))).map { [UInt8]($0) } ?? []
            return (file, failure)
        }
    }

    @Test func aBodyThatArrivesBeforeItsWriterReachesItWhole() async throws {
        let (file, error) = try await self.receive(.init(body: Self.body), attachingAfter: .milliseconds(200))
        #expect(error == nil)
        let whole = file == Self.body
        #expect(file.count == Self.body.count)
        #expect(whole, "the file is the body")
    }

    @Test func bytesThatArrivedBeforeTheConnectionDroppedReachALateWriter() async throws {
        let resource = FaultInjectingServer.Resource(body: Self.body, faults: [.closeConnection(afterBytes: 100_000)])
        let (file, error) = try await self.receive(resource, attachingAfter: .milliseconds(200))
        #expect(error != nil, "the body ended early")
        let prefix = file == Array(Self.body.prefix(100_000))
        #expect(file.count == 100_000)
        #expect(prefix, "the file is what was sent before the cut")
    }
}

@Suite("The origin a transfer counts against")
struct LastOriginTests {
    @Test func isTheSchemeHostAndPortWithTheDefaultPortFilledIn() {
        var origins = LastOrigin()
        #expect(origins.origin(of: URL(string: "http://Example.COM/a.jpg")!) == "http://example.com:80")
        #expect(origins.origin(of: URL(string: "HTTPS://example.com/a.jpg")!) == "https://example.com:443")
        #expect(origins.origin(of: URL(string: "http://127.0.0.1:8080/a?b#c")!) == "http://127.0.0.1:8080")
        #expect(origins.origin(of: URL(string: "http://user:secret@example.com")!) == "http://example.com:80")
    }

    @Test func isAskedAgainWhenTheNextURLsAuthorityDiffers() {
        // Each URL after the first tried against the one before it: the same host on another port, another scheme,
        // another host whose name starts like the last one's, and back.
        let urls = [
            ("http://a.example:1/x", "http://a.example:1"),
            ("http://a.example:1/y", "http://a.example:1"),
            ("http://a.example:2/x", "http://a.example:2"),
            ("https://a.example:2/x", "https://a.example:2"),
            ("https://a.example.org:2/x", "https://a.example.org:2"),
            ("https://a.example:2?q", "https://a.example:2"),
            ("http://a.example:1#f", "http://a.example:1"),
        ]
        var origins = LastOrigin()
        for (url, origin) in urls { #expect(origins.origin(of: URL(string: url)!) == origin, "\(url)") }
    }

    @Test func isWorkedOutOnceForARunOfURLsWithTheSameAuthority() {
        var last = LastAuthority<String>()
        var computed = 0
        func value(_ text: String) -> String {
            last.value(of: URL(string: text)!) { url in
                computed += 1
                return url.host ?? ""
            }
        }
        #expect(value("http://a.example/1") == "a.example" && computed == 1)
        #expect(value("http://a.example/2?x#y") == "a.example" && computed == 1)
        #expect(value("http://b.example/1") == "b.example" && computed == 2)
        #expect(value("http://a.example/3") == "a.example" && computed == 3)
        // A URL without an authority is worked out each time, and leaves the last one with an authority remembered.
        #expect(value("mailto:a@a.example") == "" && computed == 4)
        #expect(value("mailto:a@a.example") == "" && computed == 5)
        #expect(value("http://a.example/4") == "a.example" && computed == 5)
    }

    @Test func isNoneForASchemeOtherThanHTTPOrAURLWithoutAHost() {
        var origins = LastOrigin()
        #expect(origins.origin(of: URL(string: "http://example.com/a")!) == "http://example.com:80")
        #expect(origins.origin(of: URL(string: "ftp://example.com/a")!) == nil)
        #expect(origins.origin(of: URL(string: "file:///tmp/a")!) == nil)
        #expect(origins.origin(of: URL(string: "http:/a")!) == nil)
        #expect(origins.origin(of: URL(string: "http://example.com/b")!) == "http://example.com:80")
    }
}

@Suite("Saying why a connection failed")
struct ConnectionFailureTests {
    @Test func aSystemErrorIsTheSystemsReasonAfterWhatFailed() {
        let refused = IOError(errnoCode: ECONNREFUSED, reason: "connect")
        #expect(ConnectionFailure.message(for: refused, receivedBody: false) == "Could not connect: Connection refused")
        let reset = IOError(errnoCode: ECONNRESET, reason: "read")
        #expect(
            ConnectionFailure.message(for: reset, receivedBody: true)
                == "The connection was lost: Connection reset by peer"
        )
    }

    @Test func aFailureToConnectNamesTheServerOfTheURL() {
        let refused = IOError(errnoCode: ECONNREFUSED, reason: "connect")
        #expect(
            ConnectionFailure.message(for: refused, receivedBody: false, url: URL(string: "https://[::1]/a")!)
                == "Could not connect to [::1]:443: Connection refused"
        )
        #expect(
            ConnectionFailure.message(for: refused, receivedBody: false, url: URL(string: "http://h.example:8080/a")!)
                == "Could not connect to h.example:8080: Connection refused"
        )
    }

    @Test func aBodyCutShortSaysTheServerClosedTheConnection() {
        let cut = HTTPTransport.haulError(
            for: HTTPParserError.invalidEOFState,
            url: URL(string: "http://h.example/a")!,
            receivedBody: true
        )
        #expect((cut as? HaulError)?.code == .incompleteBody)
        #expect(
            (cut as? HaulError)?.message
                == "The connection was lost: the server closed it before the end of the response"
        )
    }

    @Test func aTimeoutSaysWhatWasAwaited() {
        let url = URL(string: "http://h.example/a")!
        let silent = HTTPTransport.haulError(for: HTTPClientError.readTimeout, url: url, receivedBody: false)
        #expect((silent as? HaulError)?.code == .timedOut)
        #expect((silent as? HaulError)?.message == "Timed out waiting for h.example:80 to answer")
        let stalled = HTTPTransport.haulError(for: HTTPClientError.readTimeout, url: url, receivedBody: true)
        #expect((stalled as? HaulError)?.message == "Timed out: h.example:80 stopped sending the response's body")
        let connecting = HTTPTransport.haulError(for: HTTPClientError.connectTimeout, url: url, receivedBody: false)
        #expect((connecting as? HaulError)?.message == "Timed out connecting to h.example:80")
    }

    @Test func thePlainHTTPClientsErrorsSayWhatTheClientsSay() {
        let url = URL(string: "http://h.example/a")!
        for (error, receivedBody, code, message) in [
            (
                HTTP1ClientError(.readTimeout), false, HaulError.Code.timedOut,
                "Timed out waiting for h.example:80 to answer"
            ),
            (
                HTTP1ClientError(.readTimeout), true, .timedOut,
                "Timed out: h.example:80 stopped sending the response's body"
            ),
            (HTTP1ClientError(.connectTimeout), false, .timedOut, "Timed out connecting to h.example:80"),
            (
                HTTP1ClientError(.remoteConnectionClosed), true, .incompleteBody,
                "The server closed the connection before the end of the response"
            ),
        ] {
            let mapped = HTTPTransport.haulError(for: error, url: url, receivedBody: receivedBody) as? HaulError
            #expect(mapped?.code == code)
            #expect(mapped?.message == message)
        }
        #expect(
            HTTPTransport.haulError(for: HTTP1ClientError(.cancelled), url: url, receivedBody: true)
                is CancellationError
        )
    }

    @Test func aTLSHandshakeFailureIsBoringSSLsReason() {
        let description =
            "handshakeFailed(NIOSSL.BoringSSLError.sslError([Error: 268435703 error:100000f7:SSL routines:"
            + "OPENSSL_internal:WRONG_VERSION_NUMBER at /src/ssl/tls_record.cc:127]))"
        #expect(ConnectionFailure.tlsReason(in: description) == "WRONG_VERSION_NUMBER")
        #expect(ConnectionFailure.tlsReason(in: "handshakeFailed(NIOSSL.BoringSSLError.unknownError([]))") == nil)
        #expect(ConnectionFailure.tlsReason(in: "OPENSSL_internal:X but not a handshake") == nil)
    }

    @Test func anotherErrorKeepsItsOwnDescription() {
        struct Odd: Error, CustomStringConvertible { var description: String { "odd" } }
        #expect(ConnectionFailure.message(for: Odd(), receivedBody: false) == "Could not connect: odd")
    }
}
