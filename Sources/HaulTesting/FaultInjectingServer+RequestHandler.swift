import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

extension FaultInjectingServer {
    /// Answers each request as the resources and their faults say, and records it.
    final class RequestHandler: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        private let state: NIOLockedValueBox<State>
        /// Which accepted connection this is, counted from 1.
        private let connection: Int
        private var head: HTTPRequestHead?
        private var responding = false
        /// For an upload or a deletion: the body so far, the fault chosen for it, and its index in `requests`.
        private var upload: (body: [UInt8], fault: Fault?, index: Int)?

        init(state: NIOLockedValueBox<State>, connection: Int) {
            self.state = state
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch self.unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                if [.PUT, .POST, .DELETE].contains(head.method) { self.upload = self.beginUpload(head) }
            case .body(let buffer):
                guard var upload = self.upload else { return }
                upload.body += buffer.readableBytesView
                self.upload = upload
                let count = upload.body.count
                self.state.withLockedValue { $0.requests[upload.index].bodyByteCount = count }
                if case .closeConnection(let afterBytes) = upload.fault, count >= afterBytes {
                    self.upload = nil
                    self.head = nil
                    context.close(promise: nil)
                }
                if case .stall(let afterBytes) = upload.fault, count >= afterBytes {
                    // Read nothing more: the client's socket buffers fill and its writes stop.
                    context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
                }
            case .end:
                guard let head = self.head else { return }
                self.head = nil
                if let upload = self.upload {
                    self.upload = nil
                    self.finishUpload(head, upload.body, fault: upload.fault, context: context)
                } else {
                    self.respond(to: head, context: context)
                }
            }
        }

        private func beginUpload(_ head: HTTPRequestHead) -> (body: [UInt8], fault: Fault?, index: Int) {
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name.lowercased()] = value }
            return self.state.withLockedValue { state in
                state.requests.append(
                    RecordedRequest(
                        method: head.method.rawValue,
                        path: head.uri,
                        headers: headers,
                        receivedAt: .now,
                        connection: self.connection
                    )
                )
                state.inFlight += 1
                state.maximumInFlight = max(state.maximumInFlight, state.inFlight)
                let key = Self.key(head.uri)
                let count = state.uploadRequestCounts[key, default: 0]
                state.uploadRequestCounts[key] = count + 1
                let faults = state.uploadFaults[key] ?? []
                self.responding = true
                return ([], count < faults.count ? faults[count] : nil, state.requests.count - 1)
            }
        }

        private func finishUpload(
            _ head: HTTPRequestHead,
            _ body: [UInt8],
            fault: Fault?,
            context: ChannelHandlerContext
        ) {
            if self.sendInjectedStatus(fault, context: context) { return }
            let key = Self.key(head.uri)
            let contentType = head.headers.first(name: "content-type")
            switch head.method {
            case .DELETE:
                let existed = self.state.withLockedValue { state -> Bool in
                    let existed = state.uploads.removeValue(forKey: key) != nil
                    return state.resources.removeValue(forKey: key) != nil || existed
                }
                self.sendText(status: existed ? .noContent : .notFound, existed ? "" : "not found\n", context: context)
            case .POST:
                guard let contentType, let form = Self.multipartFile(body, contentType: contentType) else {
                    self.sendText(status: .badRequest, "expected multipart/form-data with one file\n", context: context)
                    return
                }
                self.state.withLockedValue {
                    $0.uploads[key] = Upload(
                        body: form.body,
                        field: form.field,
                        fileName: form.fileName,
                        contentType: contentType
                    )
                }
                self.sendText(status: .created, "created\n", context: context)
            default:
                let existed = self.state.withLockedValue { state -> Bool in
                    defer { state.uploads[key] = Upload(body: body, contentType: contentType) }
                    return state.uploads[key] != nil
                }
                self.sendText(status: existed ? .noContent : .created, existed ? "" : "created\n", context: context)
            }
        }

        /// Answers with the status a `.status` or `.retryAfter` fault asks for; `false` for other faults.
        private func sendInjectedStatus(_ fault: Fault?, context: ChannelHandlerContext) -> Bool {
            switch fault {
            case .status(let code):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "injected status \(code)\n",
                    context: context
                )
                return true
            case .explainedStatus(let code, let text):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    text,
                    headers: ["Content-Type": "text/plain; charset=utf-8"],
                    context: context
                )
                return true
            case .retryAfter(let code, let value):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "slow down\n",
                    headers: ["Retry-After": value],
                    context: context
                )
                return true
            default:
                return false
            }
        }

        /// The path without its query: resources are found by path alone (a signature, a token, do not change the
        /// file).
        static func key(_ uri: String) -> String {
            String(uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
        }

        /// The one file field of a `multipart/form-data` body: its name, file name and bytes.
        static func multipartFile(
            _ body: [UInt8],
            contentType: String
        ) -> (field: String, fileName: String?, body: [UInt8])? {
            guard contentType.lowercased().hasPrefix("multipart/form-data"),
                let boundaryRange = contentType.range(of: "boundary=")
            else { return nil }
            let boundary = String(contentType[boundaryRange.upperBound...]).trimmingCharacters(
                in: .init(charactersIn: "\"")
            )
            let opening = Array("--\(boundary)\r\n".utf8)
            let closing = Array("\r\n--\(boundary)--\r\n".utf8)
            guard body.starts(with: opening), body.count >= opening.count + closing.count,
                Array(body.suffix(closing.count)) == closing
            else { return nil }
            let separator = Array("\r\n\r\n".utf8)
            let inner = Array(body[opening.count..<(body.count - closing.count)])
            guard
                let split = (0...(inner.count - separator.count)).first(where: {
                    inner[$0..<$0 + separator.count].elementsEqual(separator)
                })
            else { return nil }
            let partHeaders = String(decoding: inner[..<split], as: UTF8.self)
            func parameter(_ name: String) -> String? {
                guard let range = partHeaders.range(of: "\(name)=\"") else { return nil }
                let rest = partHeaders[range.upperBound...]
                return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
            }
            guard let field = parameter(" name") ?? parameter(";name") else { return nil }
            return (field, parameter("filename"), Array(inner[(split + separator.count)...]))
        }

        func channelInactive(context: ChannelHandlerContext) {
            if self.responding {
                self.responding = false
                self.state.withLockedValue { $0.inFlight -= 1 }
            }
            context.fireChannelInactive()
        }

        private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
            let path = head.uri
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name.lowercased()] = value }
            let (resource, fault): (Resource?, Fault?) = self.state.withLockedValue { state in
                state.requests.append(
                    RecordedRequest(
                        method: head.method.rawValue,
                        path: path,
                        headers: headers,
                        receivedAt: .now,
                        connection: self.connection
                    )
                )
                state.inFlight += 1
                state.maximumInFlight = max(state.maximumInFlight, state.inFlight)
                // Resources are found by path alone: a query (a signature, a token) does not change the file.
                let key = String(path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
                let count = state.requestCounts[key, default: 0]
                state.requestCounts[key] = count + 1
                let resource = state.resources[key] ?? state.uploads[key].map { Resource(body: $0.body) }
                let fault = resource.flatMap { count < $0.faults.count ? $0.faults[count] : nil }
                return (resource, fault)
            }
            self.responding = true

            guard var resource else {
                self.sendText(status: .notFound, "not found\n", context: context)
                return
            }
            if self.sendInjectedStatus(fault, context: context) { return }
            switch fault {
            case .noAnswer:
                return  // Nothing, until the client gives up.
            case .closeWithoutAnswer:
                context.close(promise: nil)
                return
            case .rangeNotSatisfiable(let length) where headers["range"] != nil:
                self.sendText(
                    status: .rangeNotSatisfiable,
                    "",
                    headers: ["Content-Range": "bytes */\(length)"],
                    context: context
                )
                return
            case .hugeHeader(let bytes):
                self.sendText(
                    status: .ok,
                    "x",
                    headers: ["X-Huge": String(repeating: "a", count: bytes)],
                    context: context
                )
                return
            case .conflictingContentLength:
                var conflicting = HTTPHeaders()
                conflicting.add(name: "Content-Length", value: "5")
                conflicting.add(name: "Content-Length", value: "7")
                context.write(
                    self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: conflicting))),
                    promise: nil
                )
                context.write(
                    self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: "1234567")))),
                    promise: nil
                )
                self.finishResponse(context: context)
                return
            case .announceLength(let length):
                var announced = HTTPHeaders()
                announced.add(name: "Content-Length", value: String(length))
                context.write(
                    self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: announced))),
                    promise: nil
                )
                let body = context.channel.allocator.buffer(bytes: resource.body)
                context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
                if self.responding {
                    self.responding = false
                    self.state.withLockedValue { $0.inFlight -= 1 }
                }
                context.close(promise: nil)
                return
            case .sendMoreThanAnnounced(let extra):
                var announced = HTTPHeaders()
                announced.add(name: "Content-Length", value: String(resource.body.count))
                context.write(
                    self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: announced))),
                    promise: nil
                )
                let body = context.channel.allocator.buffer(bytes: resource.body + Array(extra.utf8))
                context.write(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
                self.finishResponse(context: context)
                return
            case .redirect(let code, let location):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "",
                    headers: ["Location": location],
                    context: context
                )
                return
            case .redirectWithFields(let code, let location, let fields):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "",
                    headers: fields.merging(["Location": location]) { $1 },
                    context: context
                )
                return
            default:
                break
            }
            if case .oldBody(let bytes, _) = fault { resource.body = bytes }
            let total = resource.body.count
            var start = 0
            var status = HTTPResponseStatus.ok
            var responseHeaders = HTTPHeaders()
            if let etag = resource.etag { responseHeaders.add(name: "ETag", value: etag) }
            if let lastModified = resource.lastModified {
                responseHeaders.add(name: "Last-Modified", value: lastModified)
            }
            if let disposition = resource.contentDisposition {
                responseHeaders.add(name: "Content-Disposition", value: disposition)
            }
            responseHeaders.add(name: "Accept-Ranges", value: "bytes")
            responseHeaders.add(name: "Date", value: Self.httpDate(Date()))
            if case .addHeaders(let extra) = fault {
                for (name, value) in extra { responseHeaders.add(name: name, value: value) }
            }
            if fault == .changeETag {
                responseHeaders.replaceOrAdd(name: "ETag", value: "\"changed-\(resource.body.count)\"")
            }
            let ignoresIfRange =
                fault.map {
                    switch $0 {
                    case .changeETag, .shiftContentRange, .wrongCompleteLength: true
                    default: false
                    }
                } == true
            if fault != .ignoreRange, let range = headers["range"], let first = Self.rangeStart(range) {
                let ifRangeMatches =
                    ignoresIfRange
                    || (headers["if-range"].map { $0 == resource.etag || $0 == resource.lastModified } ?? true)
                if ifRangeMatches {
                    if first >= total {
                        responseHeaders.add(name: "Content-Range", value: "bytes */\(total)")
                        self.sendText(status: .rangeNotSatisfiable, "", headers: responseHeaders, context: context)
                        return
                    }
                    start = first
                    status = .partialContent
                    var announced = first
                    if case .shiftContentRange(let shift) = fault { announced = max(0, min(total - 1, first + shift)) }
                    var announcedTotal = total
                    if case .wrongCompleteLength(let delta) = fault { announcedTotal = total + delta }
                    responseHeaders.add(
                        name: "Content-Range",
                        value: "bytes \(announced)-\(total - 1)/\(announcedTotal)"
                    )
                }
            }
            var closeAfter: Int?
            var stallAfter: Int?
            switch fault {
            case .closeConnection(let afterBytes), .oldBody(_, let afterBytes):
                closeAfter = afterBytes
                responseHeaders.add(name: "Content-Length", value: String(total - start))
            case .cutChunkedBody(let afterBytes):
                closeAfter = afterBytes
                responseHeaders.add(name: "Transfer-Encoding", value: "chunked")
            case .stall(let afterBytes):
                stallAfter = afterBytes
                responseHeaders.add(name: "Content-Length", value: String(total - start))
            case .stallChunked(let afterBytes):
                stallAfter = afterBytes
                responseHeaders.add(name: "Transfer-Encoding", value: "chunked")
            default:
                responseHeaders.add(name: "Content-Length", value: String(total - start))
            }
            context.write(
                self.wrapOutboundOut(
                    .head(HTTPResponseHead(version: .http1_1, status: status, headers: responseHeaders))
                ),
                promise: nil
            )
            if let stallAfter {
                let end = min(total, start + stallAfter)
                let buffer = context.channel.allocator.buffer(bytes: resource.body[start..<end])
                context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
                self.state.withLockedValue { $0.servedBodyBytes += end - start }
                return  // Nothing more until the client gives up.
            }
            self.writeBody(resource, from: start, sent: 0, closeAfter: closeAfter, context: context)
        }

        private func writeBody(
            _ resource: Resource,
            from offset: Int,
            sent: Int,
            closeAfter: Int?,
            context: ChannelHandlerContext
        ) {
            guard context.channel.isActive else { return }
            var end = min(resource.body.count, offset + resource.chunkSize)
            if let closeAfter { end = min(end, offset + max(0, closeAfter - sent)) }
            if end > offset {
                let buffer = context.channel.allocator.buffer(bytes: resource.body[offset..<end])
                context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
                self.state.withLockedValue { $0.servedBodyBytes += end - offset }
            }
            let sentNow = sent + (end - offset)
            if let closeAfter, sentNow >= closeAfter, end < resource.body.count || resource.chunkDelay != nil {
                context.flush()
                if let delay = resource.chunkDelay {
                    // Let the client read what was sent before it sees the connection close.
                    context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(delay.nanosecondsValue)) {
                        context.close(promise: nil)
                    }
                } else {
                    context.close(promise: nil)
                }
                return
            }
            if end >= resource.body.count {
                self.finishResponse(context: context)
                return
            }
            if let delay = resource.chunkDelay {
                context.flush()
                let loop = context.eventLoop.assumeIsolated()
                loop.scheduleTask(in: .nanoseconds(delay.nanosecondsValue)) {
                    self.writeBody(resource, from: end, sent: sentNow, closeAfter: closeAfter, context: context)
                }
            } else {
                self.writeBody(resource, from: end, sent: sentNow, closeAfter: closeAfter, context: context)
            }
        }

        private func sendText(
            status: HTTPResponseStatus,
            _ text: String,
            headers: [String: String],
            context: ChannelHandlerContext
        ) {
            var httpHeaders = HTTPHeaders()
            for (name, value) in headers { httpHeaders.add(name: name, value: value) }
            self.sendText(status: status, text, headers: httpHeaders, context: context)
        }

        private func sendText(
            status: HTTPResponseStatus,
            _ text: String,
            headers: HTTPHeaders = HTTPHeaders(),
            context: ChannelHandlerContext
        ) {
            var headers = headers
            headers.replaceOrAdd(name: "Content-Length", value: String(text.utf8.count))
            context.write(
                self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
                promise: nil
            )
            if !text.isEmpty {
                context.write(
                    self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: text)))),
                    promise: nil
                )
            }
            self.finishResponse(context: context)
        }

        private func finishResponse(context: ChannelHandlerContext) {
            if self.responding {
                self.responding = false
                self.state.withLockedValue { $0.inFlight -= 1 }
            }
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }

        static func httpDate(_ date: Date) -> String {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
            return formatter.string(from: date)
        }

        /// The first byte of `bytes=N-` or `bytes=N-M` (M is ignored: the server sends to the end).
        static func rangeStart(_ header: String) -> Int? {
            guard header.hasPrefix("bytes="), !header.contains(",") else { return nil }
            let spec = header.dropFirst(6)
            guard let dash = spec.firstIndex(of: "-") else { return nil }
            return Int(spec[..<dash])
        }
    }
}
