import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// The driver of one upload attempt: streams a file (or data) to the server with `PUT` or a multipart `POST`.
///
/// The lifecycle (queue, retries, pause, cancel) is the shared ``Download/StateMachine``; an upload has no partial
/// state on the server, so every attempt, a resumed one included, sends the body from the start.
enum Upload {
    /// Runs one attempt to completion, failure or stop; never throws.
    static func run(
        _ plan: Download.Plan,
        _ upload: TransferRequest.Upload,
        transport: HTTPTransport,
        observer: some Download.Observer
    ) async -> Download.AttemptOutcome {
        await Download.outcome {
            try await self.attempt(plan, upload, transport: transport, observer: observer)
        }
    }

    private static func attempt(
        _ plan: Download.Plan,
        _ upload: TransferRequest.Upload,
        transport: HTTPTransport,
        observer: some Download.Observer
    ) async throws -> Download.AttemptOutcome {
        let payload: UploadBody.Part
        let completedPath: URL
        var modificationTime: Double?
        switch upload.source {
        case .file(let url):
            let file = try SourceFile(path: url.path)
            payload = .file(file)
            completedPath = url
            modificationTime = file.modificationTime
        case .data(let data):
            payload = .data(data)
            completedPath = plan.url
        }
        let size = payload.byteCount
        let base = plan.progress.load()
        observer.attemptStarted(plan.id, offset: 0)
        observer.responseAccepted(plan.id, validator: Download.Validator(), expectedBytes: size, receivedBytes: base)

        let (url, preparedHeaders) = await plan.preparedRequest()
        var headers = preparedHeaders
        let contentType = upload.contentType ?? "application/octet-stream"
        var parts = [payload]
        if let field = upload.method.multipartField {
            let boundary = "haul-" + String(hexOf: (0..<16).map { _ in UInt8.random(in: 0...255) })
            let form = Multipart(boundary: boundary, field: field, fileName: upload.fileName, contentType: contentType)
            parts = [.framing(form.head), payload, .framing(form.tail)]
            headers.append(("Content-Type", "multipart/form-data; boundary=\(boundary)"))
        } else if !headers.contains(where: { $0.name.lowercased() == "content-type" }) {
            headers.append(("Content-Type", contentType))
        }
        let body = UploadBody(parts: parts, progress: plan.progress, base: base, plan: plan)
        let length = body.length
        let method: HTTPMethod = upload.method.multipartField == nil ? .PUT : .POST
        let (requestHeaders, idle) = (headers, plan.idleTimeout)
        let response = try await withThrowingTaskGroup(of: HTTPClientResponse?.self) { group in
            group.addTask {
                try await transport.send(
                    method,
                    url,
                    headers: requestHeaders,
                    body: { .stream(body, length: .known(length)) }
                )
            }
            group.addTask {
                try await body.watch.failWhenStalled(idle: idle)
                return nil
            }
            let first = try await group.next()!
            group.cancelAll()
            return first!
        }
        let status = Int(response.status.code)
        let answer = await HTTPTransport.drain(response)
        guard (200...299).contains(status) else {
            throw HTTPTransport.statusError(response, body: answer)
        }
        try plan.checkStatusHook(status)
        plan.progress.store(max(base, size))
        return .completed(
            CompletedFile(path: completedPath, byteCount: size, sha256: nil, modificationTime: modificationTime)
        )
    }

    /// The framing of a `multipart/form-data` body with one file field (RFC 7578).
    struct Multipart: Sendable {
        var boundary: String
        var field: String
        var fileName: String
        var contentType: String

        /// Everything before the file's bytes.
        var head: [UInt8] {
            let disposition =
                "form-data; name=\"\(Self.escaped(self.field))\"; filename=\"\(Self.escaped(self.fileName))\""
            return Array(
                "--\(self.boundary)\r\nContent-Disposition: \(disposition)\r\nContent-Type: \(self.contentType)\r\n\r\n"
                    .utf8
            )
        }

        /// Everything after the file's bytes.
        var tail: [UInt8] { Array("\r\n--\(self.boundary)--\r\n".utf8) }

        /// A name as HTML forms write it in a quoted parameter: `"`, CR and LF percent-encoded.
        static func escaped(_ name: String) -> String {
            name.replacingOccurrences(of: "\"", with: "%22")
                .replacingOccurrences(of: "\r", with: "%0D")
                .replacingOccurrences(of: "\n", with: "%0A")
        }
    }
}
