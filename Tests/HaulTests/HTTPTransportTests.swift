import AsyncHTTPClient
import HaulTesting
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
            let client = HTTPTransport.makeClient(configuration)
            let transport = HTTPTransport(client: client, configuration: configuration)
            var largest = 0
            var received = 0
            do {
                let response = try await transport.get(server.url("/big"), headers: [])
                // Let the server fill the socket's buffer, so that reads can fill theirs.
                try await Task.sleep(for: .milliseconds(100))
                for try await chunk in response.body {
                    largest = max(largest, chunk.readableBytes)
                    received += chunk.readableBytes
                }
            } catch {
                try await client.shutdown()
                throw error
            }
            try await client.shutdown()
            #expect(received == body.count)
            #expect(largest > 64 * 1024)
            #expect(largest <= 1024 * 1024)
        }
    }
}
