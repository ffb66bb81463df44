import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// The seam between Haul and AsyncHTTPClient: builds requests, runs them, and turns the client's errors into
/// ``HaulError``s. Everything above it speaks Haul's types only.
struct HTTPTransport: Sendable {
    let client: HTTPClient
    /// How long a request may take until its response head arrives (connect, send, wait).
    let headDeadline: TimeAmount

    /// Makes the shared client for a manager's configuration: HTTP/1.1 (faster than HTTP/2 for bulk data here),
    /// no decompression (files are stored as sent), the idle timeout as the read timeout (it catches stalled
    /// bodies, which a request deadline does not), and no silent connection retries (Haul decides about retries).
    static func makeClient(_ configuration: TransferManager.Configuration) -> HTTPClient {
        var clientConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .follow(max: configuration.maximumRedirects, allowCycles: false),
            timeout: .init(
                connect: .nanoseconds(configuration.connectTimeout.nanoseconds),
                read: .nanoseconds(configuration.idleTimeout.nanoseconds)),
            decompression: .disabled
        )
        clientConfiguration.httpVersion = .http1Only
        clientConfiguration.connectionPool.retryConnectionEstablishment = false
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(
            configuration.maximumTransfersPerHost, 1)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
    }

    /// Sends a GET and returns the response once its head has arrived.
    func get(_ url: URL, headers: [(name: String, value: String)]) async throws -> HTTPClientResponse {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw HaulError(.invalidRequest, "Only http and https URLs can be downloaded: \(url.absoluteString)")
        }
        guard let host = url.host, !host.isEmpty else {
            throw HaulError(.invalidRequest, "The URL has no host: \(url.absoluteString)")
        }
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .GET
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        do {
            return try await self.client.execute(request, deadline: .now() + self.headDeadline)
        } catch {
            throw Self.haulError(for: error, url: url, receivedBody: false)
        }
    }

    /// The Haul error for an error thrown by the client or by a body iteration.
    static func haulError(for error: any Error, url: URL, receivedBody: Bool) -> any Error {
        if error is HaulError || error is CancellationError { return error }
        if let clientError = error as? HTTPClientError {
            switch clientError {
            case .cancelled:
                return CancellationError()
            case .connectTimeout, .readTimeout, .writeTimeout, .deadlineExceeded, .tlsHandshakeTimeout,
                .getConnectionFromPoolTimeout:
                return HaulError(.timedOut, "Timed out (\(clientError))", underlying: error)
            case .remoteConnectionClosed, .bodyLengthMismatch:
                return HaulError(
                    receivedBody ? .incompleteBody : .connectionFailed,
                    "The server closed the connection before the end of the response", underlying: error)
            case .redirectLimitReached, .redirectCycleDetected:
                return HaulError(.invalidRequest, "Too many redirects, or a redirect loop", underlying: error)
            case .invalidURL, .emptyHost, .emptyScheme:
                return HaulError(.invalidRequest, "Not a URL Haul can download: \(url.absoluteString)", underlying: error)
            default:
                break
            }
        }
        return HaulError(
            receivedBody ? .incompleteBody : .connectionFailed,
            "\(receivedBody ? "The connection was lost" : "Could not connect"): \(error)",
            underlying: error)
    }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : product + attoseconds / 1_000_000_000
    }
}
