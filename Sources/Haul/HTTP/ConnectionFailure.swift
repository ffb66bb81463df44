import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// Why a connection could not be made or was lost, in the words a person needs: the system's reason, the name that
/// did not resolve, the TLS library's reason. SwiftNIO's own descriptions nest every layer (`Connection errors:
/// SingleConnectionFailure(target: [IPv4]127.0.0.1/127.0.0.1:1, error: connection reset (error set): Connection
/// refused) (errno: 111))`), which is what the failure lines used to show. Pure: a function of the error.
enum ConnectionFailure {
    /// The message for `error` (thrown while connecting, or while reading a response when `receivedBody`):
    /// `Could not connect to 127.0.0.1:1: Connection refused`, `Could not resolve example.invalid: Name or service
    /// not known`, `TLS handshake failed: CERTIFICATE_VERIFY_FAILED`, `The connection was lost: Connection reset by
    /// peer`. An error of another kind keeps its own description after the prefix.
    ///
    /// `url`, when given, names the server in a failure to connect that does not name it itself.
    static func message(for error: any Error, receivedBody: Bool, url: URL? = nil) -> String {
        let server = url.flatMap(Self.server(of:))
        let prefix = receivedBody ? "The connection was lost" : "Could not connect\(server.map { " to \($0)" } ?? "")"
        if let error = error as? NIOConnectionError {
            if let lookup = error.dnsAError ?? error.dnsAAAAError {
                return "Could not resolve \(error.host): \(Self.reason(for: lookup))"
            }
            var reasons: [String] = []
            for failure in error.connectionErrors {
                let reason = Self.reason(for: failure.error)
                if !reasons.contains(reason) { reasons.append(reason) }
            }
            let target = Self.authority(error.host, error.port)
            return reasons.isEmpty
                ? "Could not connect to \(target): no address to try"
                : "Could not connect to \(target): \(reasons.joined(separator: "; "))"
        }
        if let error = error as? SocketAddressError.UnknownHost {
            return "Could not resolve \(error.host): \(error.errorDescription)"
        }
        return "\(prefix): \(Self.reason(for: error))"
    }

    /// The message for one of the client's timeouts: what was being waited for, rather than the error's name
    /// (`Timed out (HTTPClientError.readTimeout)`).
    static func timeoutMessage(for error: HTTPClientError, receivedBody: Bool, url: URL) -> String {
        let server = Self.server(of: url) ?? url.absoluteString
        switch error {
        case .connectTimeout: return "Timed out connecting to \(server)"
        case .tlsHandshakeTimeout: return "Timed out in the TLS handshake with \(server)"
        case .writeTimeout: return "Timed out sending the request to \(server)"
        case .getConnectionFromPoolTimeout: return "Timed out waiting for a connection to \(server)"
        case .deadlineExceeded: return "Timed out: the request's deadline passed"
        default:
            return receivedBody
                ? "Timed out: \(server) stopped sending the response's body"
                : "Timed out waiting for \(server) to answer"
        }
    }

    /// `host:port`, an IPv6 address in brackets.
    static func authority(_ host: String, _ port: Int) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// The server a URL names, `host:port` with the scheme's default port filled in; `nil` without a host.
    static func server(of url: URL) -> String? {
        url.host.map { Self.authority($0, url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)) }
    }

    /// The reason one error gives: the system's text for an `errno`, a name's resolution failure, or the error's
    /// description.
    static func reason(for error: any Error) -> String {
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
        if let error = error as? HTTPParserError, error == .invalidEOFState {
            return "the server closed it before the end of the response"
        }
        if let error = error as? SocketAddressError.UnknownHost { return error.errorDescription }
        if let error = error as? ChannelError, case .connectTimeout(let after) = error {
            return "no answer within \(after)"
        }
        return "\(error)"
    }

    /// The message for a failed TLS handshake (`TLS handshake with example.com:443 failed: CERTIFICATE_VERIFY_FAILED`),
    /// or `nil` when `error` is not SwiftNIO SSL's.
    static func tlsFailure(_ error: any Error, url: URL) -> String? {
        guard error is NIOSSLError || error is NIOSSLExtraError else { return nil }
        let server = Self.server(of: url) ?? url.absoluteString
        let description = "\(error)"
        return "TLS handshake with \(server) failed: \(Self.tlsReason(in: description) ?? description)"
    }

    /// The reason BoringSSL gave for a failed handshake (`WRONG_VERSION_NUMBER`, `CERTIFICATE_VERIFY_FAILED`), read
    /// from the description of SwiftNIO SSL's error (`...:SSL routines:OPENSSL_internal:REASON at FILE:LINE]`), or
    /// `nil` when the description has none.
    static func tlsReason(in description: String) -> String? {
        guard description.hasPrefix("handshakeFailed("), let marker = description.range(of: "OPENSSL_internal:")
        else { return nil }
        let rest = description[marker.upperBound...]
        let reason = rest.prefix { $0 != " " && $0 != "]" && $0 != ")" }
        return reason.isEmpty ? nil : String(reason)
    }
}
