import Foundation
import Haul
import HaulTesting

/// A fresh folder under the system's temporary folder, removed after `body`.
func withTemporaryDirectory<Result>(_ body: (URL) async throws -> Result) async throws -> Result {
    let url = FileManager.default.temporaryDirectory.appending(
        path: "haul-tests-\(UUID().uuidString)",
        directoryHint: .isDirectory
    )
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try await body(url)
}

/// The bytes of a file, or `nil` if it does not exist.
func contents(of url: URL) -> [UInt8]? {
    (try? Data(contentsOf: url)).map { [UInt8]($0) }
}

/// The names in a folder, sorted.
func names(in folder: URL) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
}

extension TransferManager.Configuration {
    /// A configuration for tests: a fast progress interval and short timeouts.
    static func testing(concurrent: Int = 4, perHost: Int = 6) -> Self {
        var configuration = Self()
        configuration.maximumConcurrentTransfers = concurrent
        configuration.maximumTransfersPerHost = perHost
        configuration.progressInterval = .milliseconds(10)
        configuration.connectTimeout = .seconds(5)
        configuration.idleTimeout = .seconds(10)
        return configuration
    }
}

extension TransferManager {
    /// Enqueues `requests` as one batch whose events are asked for before its first transfer is added: a batch's
    /// events begin when first asked for, and a transfer may start, and end, on an event loop before `enqueue`
    /// returns. The stream begins with the transfers' `queued` events.
    func enqueueWithEvents(_ requests: [TransferRequest]) throws -> (Batch, AsyncStream<BatchEvent>) {
        let batch = try self.makeBatch()
        let events = batch.events
        try batch.add(contentsOf: requests)
        batch.seal()
        return (batch, events)
    }
}

extension TransferManager {
    /// Downloads `urls` into `folder` as one batch, in a manager of its own, and returns every event of the batch's
    /// stream of `selection`, its end included; the stream is asked for before the first transfer is added.
    static func batchEvents(
        _ selection: BatchEvent.Selection,
        downloading urls: [URL],
        into folder: URL,
        configuration: Configuration = .testing()
    ) async throws -> [BatchEvent] {
        try await Self.withTransferManager(configuration: configuration) { manager in
            let batch = try manager.makeBatch()
            let stream = batch.events(selection)
            for url in urls { try batch.add(TransferRequest(url: url, into: folder)) }
            batch.seal()
            var events: [BatchEvent] = []
            for await event in stream { events.append(event) }
            return events
        }
    }
}

extension TransferManager {
    /// The events of `selection` in a batch of three downloads, `/a`, `/missing` (a 404) and `/b`, from a server that
    /// sends `/a` and `/b` slowly enough (300 KB in 10 KB chunks, 5 ms apart) for each to report progress.
    static func batchEventsOfTwoSlowFilesAndAMissingOne(_ selection: BatchEvent.Selection) async throws -> [BatchEvent]
    {
        let body = FaultInjectingServer.body(size: 300_000, seed: 4)
        let resource = FaultInjectingServer.Resource(body: body, chunkSize: 10_000, chunkDelay: .milliseconds(5))
        return try await FaultInjectingServer.withServer(resources: ["/a": resource, "/b": resource]) { server in
            try await withTemporaryDirectory { folder in
                try await Self.batchEvents(
                    selection,
                    downloading: ["/a", "/missing", "/b"].map { server.url($0) },
                    into: folder
                )
            }
        }
    }
}

extension Batch {
    /// Waits for the first event of the batch that satisfies `predicate`.
    func firstEvent(where predicate: (BatchEvent) -> Bool) async -> BatchEvent? {
        for await event in self.events where predicate(event) { return event }
        return nil
    }
}
