import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

// The floor under `haul get`: what AsyncHTTPClient alone costs on a list of URLs, configured as Haul configures it
// (HTTP/1.1, no decompression, the read timeout, no request spans), with the same number of requests in flight. It
// answers "how much of Haul's time is the HTTP client's, and how much Haul's own" on the same corpus and machine.
//
//     swift build -c release --package-path Benchmarks --product haul-http-floor
//     Benchmarks/.build/release/haul-http-floor MODE LIST [FOLDER] [-j N]
//
// MODE:
//   http        `execute(_:deadline:)` and the body iterated, bytes dropped (Haul's way of calling the client)
//   http-files  the same, each body written to FOLDER: created, written at explicit offsets, closed, renamed
//   delegate    the client's delegate API, the body handed to an async consumer through a small bridge
//   delegate-files  the delegate API writing each body to FOLDER on the event loop as it arrives
//
// and, without AsyncHTTPClient (the floor under any HTTP/1.1 client on SwiftNIO; http URLs of one origin):
//   nio              SwiftNIO's HTTP/1.1 codec on N keep-alive connections, all on the event loops, bytes dropped
//   nio-files        the same, each body written as `http-files` writes it, on the event loop
//   nio-async        one task per connection through `NIOAsyncChannel` (the hand-offs a transfer task has)
//   nio-async-files  the same, each body written from its task
//
// `--task-per-request` (the client's modes): a detached task per URL, N at a time, as Haul's manager runs a task per
// transfer, instead of N tasks that each fetch URL after URL.
//
// Prints one line: the mode, wall seconds, CPU milliseconds (user + system, `getrusage`), requests and bytes.
// See docs/performance.md.

/// A response delegate whose head and body parts an async caller awaits, with backpressure: the client stops
/// reading while four parts wait.
final class AsyncBodyBridge: HTTPClientResponseDelegate, Sendable {
    typealias Response = Void

    private struct State {
        var head: HTTPResponseHead?
        var headWaiter: CheckedContinuation<HTTPResponseHead, any Error>?
        var parts: [ByteBuffer] = []
        var finished = false
        var error: (any Error)?
        var partWaiter: CheckedContinuation<ByteBuffer?, any Error>?
        var readingPaused: EventLoopPromise<Void>?
    }

    private let state = NIOLockedValueBox(State())
    private static let waitingPartsLimit = 4

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        let waiter = self.state.withLockedValue { state in
            state.head = head
            defer { state.headWaiter = nil }
            return state.headWaiter
        }
        waiter?.resume(returning: head)
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let (waiter, paused) = self.state.withLockedValue {
            state -> (CheckedContinuation<ByteBuffer?, any Error>?, EventLoopFuture<Void>?) in
            if let waiter = state.partWaiter {
                state.partWaiter = nil
                return (waiter, nil)
            }
            state.parts.append(buffer)
            guard state.parts.count >= Self.waitingPartsLimit else { return (nil, nil) }
            let promise = task.eventLoop.makePromise(of: Void.self)
            state.readingPaused = promise
            return (nil, promise.futureResult)
        }
        waiter?.resume(returning: buffer)
        return paused ?? task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        let (headWaiter, partWaiter) = self.state.withLockedValue { state in
            state.error = error
            defer { (state.headWaiter, state.partWaiter) = (nil, nil) }
            return (state.headWaiter, state.partWaiter)
        }
        headWaiter?.resume(throwing: error)
        partWaiter?.resume(throwing: error)
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        let waiter = self.state.withLockedValue { state in
            state.finished = true
            defer { state.partWaiter = nil }
            return state.partWaiter
        }
        waiter?.resume(returning: nil)
    }

    /// The response head, once it has arrived.
    func head() async throws -> HTTPResponseHead {
        try await withCheckedThrowingContinuation { continuation in
            let ready = self.state.withLockedValue { state -> Result<HTTPResponseHead, any Error>? in
                if let head = state.head { return .success(head) }
                if let error = state.error { return .failure(error) }
                state.headWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    /// The next body part, or `nil` at the end of the body.
    func next() async throws -> ByteBuffer? {
        let (ready, resumeReading) = self.state.withLockedValue {
            state -> (Result<ByteBuffer?, any Error>?, EventLoopPromise<Void>?) in
            guard state.parts.isEmpty else {
                let part = state.parts.removeFirst()
                let resume = state.parts.count < Self.waitingPartsLimit / 2 ? state.readingPaused : nil
                if resume != nil { state.readingPaused = nil }
                return (.success(part), resume)
            }
            if let error = state.error { return (.failure(error), nil) }
            return (state.finished ? .success(nil) : nil, nil)
        }
        resumeReading?.succeed(())
        if let ready { return try ready.get() }
        return try await withCheckedThrowingContinuation { continuation in
            let ready = self.state.withLockedValue { state -> Result<ByteBuffer?, any Error>? in
                if !state.parts.isEmpty { return .success(state.parts.removeFirst()) }
                if let error = state.error { return .failure(error) }
                if state.finished { return .success(nil) }
                state.partWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}

enum Mode: String {
    case http, httpFiles = "http-files", delegate, nio, nioFiles = "nio-files", nioAsync = "nio-async"
    case nioAsyncFiles = "nio-async-files", delegateFiles = "delegate-files"
}

/// A body written as `haul get` writes a file: `f<index>.part` created in the folder, written at explicit offsets,
/// closed and renamed to `f<index>` by ``finish()``; closed and left in place when dropped unfinished.
struct BodyFile: ~Copyable {
    private let partial: String
    private let final: String
    private let descriptor: Int32
    private var offset = 0

    init(folder: String, index: Int) throws {
        self.partial = "\(folder)/f\(index).part"
        self.final = "\(folder)/f\(index)"
        self.descriptor = open(self.partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard self.descriptor >= 0 else { throw HTTPFloorError("cannot create \(self.partial): errno \(errno)") }
    }

    mutating func write(_ buffer: ByteBuffer) throws {
        let written = buffer.withUnsafeReadableBytes {
            pwrite(self.descriptor, $0.baseAddress, $0.count, off_t(self.offset))
        }
        guard written == buffer.readableBytes else { throw HTTPFloorError("short write to \(self.partial)") }
        self.offset += buffer.readableBytes
    }

    consuming func finish() throws {
        let (partial, final) = (self.partial, self.final)
        _ = consume self
        guard rename(partial, final) == 0 else { throw HTTPFloorError("cannot rename \(partial): errno \(errno)") }
    }

    deinit { close(self.descriptor) }
}

/// A response delegate that writes the body to its file on the event loop, as it arrives (created at the head,
/// written at explicit offsets, closed and renamed at the end), and completes the request's future with the byte
/// count: the task that asked waits once per file, for the end, instead of for the head and each part. Unchecked:
/// the client calls a delegate on its request's event loop only, one call at a time.
final class FileWritingDelegate: HTTPClientResponseDelegate, @unchecked Sendable {
    typealias Response = Int

    private let folder: String
    private let index: Int
    private var file: BodyFile?
    private var byteCount = 0

    init(folder: String, index: Int) {
        self.folder = folder
        self.index = index
    }

    func didReceiveHead(task: HTTPClient.Task<Int>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        guard head.status == .ok else {
            return task.eventLoop.makeFailedFuture(HTTPFloorError("\(self.folder)/f\(self.index): \(head.status)"))
        }
        return task.eventLoop.makeCompletedFuture { self.file = try BodyFile(folder: self.folder, index: self.index) }
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Int>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        task.eventLoop.makeCompletedFuture {
            try self.file?.write(buffer)
            self.byteCount += buffer.readableBytes
        }
    }

    func didReceiveError(task: HTTPClient.Task<Int>, _ error: any Error) {
        self.file = nil
    }

    func didFinishRequest(task: HTTPClient.Task<Int>) throws -> Int {
        try self.file.take()?.finish()
        return self.byteCount
    }
}

/// One keep-alive connection of the `nio` modes: SwiftNIO's HTTP/1.1 codec and nothing else. It asks for the next
/// URL of the shared list when a response ends, and does everything on its event loop: no hand-off to Swift
/// concurrency, no client, no timers. With a folder, each body is written as `http-files` writes it (created,
/// written at explicit offsets, closed, renamed), on the event loop too (the page cache's writes are short).
final class RawFetcher: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private let list: RawList
    private let folder: String?
    private let done: EventLoopPromise<Void>
    private var index = 0
    private var file: BodyFile?
    private var offset = 0
    private var isDone = false

    init(list: RawList, folder: String?, done: EventLoopPromise<Void>) {
        self.list = list
        self.folder = folder
        self.done = done
    }

    func channelActive(context: ChannelHandlerContext) {
        self.requestNext(context: context)
    }

    private func requestNext(context: ChannelHandlerContext) {
        guard let index = self.list.take() else {
            self.isDone = true
            self.done.succeed(())
            context.close(promise: nil)
            return
        }
        self.index = index
        context.write(self.wrapOutboundOut(.head(self.list.requestHead(index))), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            guard head.status == .ok else {
                return self.fail(context, "\(self.list.paths[self.index]): \(head.status)")
            }
            self.offset = 0
            do {
                if let folder { self.file = try BodyFile(folder: folder, index: self.index) }
            } catch {
                self.fail(context, "\(error)")
            }
        case .body(let part):
            do {
                try self.file?.write(part)
            } catch {
                return self.fail(context, "\(error)")
            }
            self.offset += part.readableBytes
        case .end:
            self.list.received(self.offset)
            do {
                try self.file.take()?.finish()
            } catch {
                return self.fail(context, "\(error)")
            }
            self.requestNext(context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.fail(context, "\(error)")
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.fail(context, "the server closed the connection")
    }

    private func fail(_ context: ChannelHandlerContext, _ message: String) {
        self.file = nil
        guard !self.isDone else { return }
        self.isDone = true
        self.done.fail(HTTPFloorError(message))
        context.close(promise: nil)
    }
}

/// The URLs of the `nio` modes (one origin), handed out in order to whichever connection asks next.
final class RawList: Sendable {
    /// Where to connect, and the requests' `Host` header.
    let hostName: String
    let port: Int
    let hostHeader: String
    let paths: [String]
    private let next = NIOLockedValueBox(0)
    private let bytes = NIOLockedValueBox(0)

    init(_ urls: [String]) throws {
        let parsed = urls.compactMap { URL(string: $0) }
        guard parsed.count == urls.count, let first = parsed.first, let host = first.host,
            parsed.allSatisfy({ $0.scheme == "http" && $0.host == host && $0.port == first.port })
        else { throw HTTPFloorError("the nio modes take http URLs of one host and port") }
        self.hostName = host
        self.port = first.port ?? 80
        self.hostHeader = first.port.map { "\(host):\($0)" } ?? host
        self.paths = parsed.map { $0.path.isEmpty ? "/" : $0.path }
    }

    /// A keep-alive connection's bootstrap, reading as Haul's connections read: up to 1 MiB at a time (a share of
    /// 32 MiB over 16 connections), one read per wake-up.
    static func bootstrap(_ group: any EventLoopGroup) -> ClientBootstrap {
        ClientBootstrap(group: group)
            .channelOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: 1 << 20)
            )
            .channelOption(ChannelOptions.maxMessagesPerRead, value: 1)
    }

    /// A GET of `paths[index]`.
    func requestHead(_ index: Int) -> HTTPRequestHead {
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: self.paths[index])
        head.headers.add(name: "Host", value: self.hostHeader)
        return head
    }

    func take() -> Int? {
        self.next.withLockedValue { next in
            guard next < self.paths.count else { return nil }
            defer { next += 1 }
            return next
        }
    }

    func received(_ count: Int) { self.bytes.withLockedValue { $0 += count } }
    var totalBytes: Int { self.bytes.withLockedValue { $0 } }
}

/// Runs the `nio` modes: `concurrency` connections, each fetching until the list is done. Returns the bytes received.
func fetchRaw(_ urls: [String], concurrency: Int, folder: String?) async throws -> Int {
    let list = try RawList(urls)
    let group = MultiThreadedEventLoopGroup.singleton
    var finished: [EventLoopFuture<Void>] = []
    for _ in 0..<concurrency {
        let loop = group.next()
        let done = loop.makePromise(of: Void.self)
        let connected = RawList.bootstrap(loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // As Haul's connections: without SwiftNIO's outbound validator (Haul checks a request as it makes
                    // it; these requests are the list's own).
                    try channel.pipeline.syncOperations.addHTTPClientHandlers(enableOutboundHeaderValidation: false)
                    try channel.pipeline.syncOperations.addHandler(RawFetcher(list: list, folder: folder, done: done))
                }
            }
            .connect(host: list.hostName, port: list.port)
        connected.whenFailure { done.fail($0) }
        finished.append(done.futureResult)
    }
    for future in finished { try await future.get() }
    return list.totalBytes
}

/// Runs the `nio-async` modes: `concurrency` tasks, each with one keep-alive connection wrapped in an
/// `NIOAsyncChannel` (SwiftNIO's HTTP/1.1 codec, no client), fetching URLs of the shared list in turn and writing
/// each body from its task as `http-files` does: what a client of Haul's own on SwiftNIO's async bridge would cost,
/// with the same hand-offs between the event loops and Swift concurrency that a transfer task has.
func fetchRawAsync(_ urls: [String], concurrency: Int, folder: String?) async throws -> Int {
    let list = try RawList(urls)
    let group = MultiThreadedEventLoopGroup.singleton
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        for _ in 0..<concurrency {
            tasks.addTask {
                let channel = try await RawList.bootstrap(group)
                    .connect(host: list.hostName, port: list.port) { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHTTPClientHandlers(
                                enableOutboundHeaderValidation: false
                            )
                            return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                                wrappingChannelSynchronously: channel
                            )
                        }
                    }
                try await channel.executeThenClose { inbound, outbound in
                    var responses = inbound.makeAsyncIterator()
                    while let index = list.take() {
                        try await outbound.write(contentsOf: [.head(list.requestHead(index)), .end(nil)])
                        var file: BodyFile?
                        var offset = 0
                        var ended = false
                        response: while let part = try await responses.next() {
                            switch part {
                            case .head(let head):
                                guard head.status == .ok else {
                                    throw HTTPFloorError("\(list.paths[index]): \(head.status)")
                                }
                                if let folder { file = try BodyFile(folder: folder, index: index) }
                            case .body(let body):
                                try file?.write(body)
                                offset += body.readableBytes
                            case .end:
                                ended = true
                                break response
                            }
                        }
                        guard ended else { throw HTTPFloorError("the server closed the connection") }
                        list.received(offset)
                        try file.take()?.finish()
                    }
                }
            }
        }
        try await tasks.waitForAll()
    }
    return list.totalBytes
}

/// Fetches one URL in `mode`; returns the body's length.
func fetch(_ url: String, index: Int, mode: Mode, client: HTTPClient, folder: String?) async throws -> Int {
    var bytes = 0
    switch mode {
    case .http, .httpFiles:
        let response = try await client.execute(HTTPClientRequest(url: url), deadline: .distantFuture)
        guard response.status == .ok else { throw HTTPFloorError("\(url): \(response.status)") }
        guard mode == .httpFiles, let folder else {
            for try await part in response.body { bytes += part.readableBytes }
            return bytes
        }
        var file = try BodyFile(folder: folder, index: index)
        for try await part in response.body {
            try file.write(part)
            bytes += part.readableBytes
        }
        try file.finish()
    case .delegate:
        let bridge = AsyncBodyBridge()
        // The bridge hears the end and any error itself; awaiting the task's future too would add a hand-off per request.
        _ = client.execute(request: try HTTPClient.Request(url: url), delegate: bridge)
        let head = try await bridge.head()
        guard head.status == .ok else { throw HTTPFloorError("\(url): \(head.status)") }
        while let part = try await bridge.next() { bytes += part.readableBytes }
    case .delegateFiles:
        guard let folder else { throw HTTPFloorError("delegate-files needs a FOLDER") }
        let delegate = FileWritingDelegate(folder: folder, index: index)
        bytes = try await client.execute(request: try HTTPClient.Request(url: url), delegate: delegate).get()
    case .nio, .nioFiles, .nioAsync, .nioAsyncFiles:
        throw HTTPFloorError("the nio modes run without the client")
    }
    return bytes
}

struct HTTPFloorError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

@main
enum HTTPFloor {
    static func main() async {
        do {
            try await self.run()
        } catch {
            FileHandle.standardError.write(Data("haul-http-floor: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        var arguments = Array(CommandLine.arguments.dropFirst())
        var concurrency = 16
        let taskPerRequest = arguments.contains("--task-per-request")
        arguments.removeAll { $0 == "--task-per-request" }
        if let flag = arguments.firstIndex(of: "-j"), flag + 1 < arguments.count, let value = Int(arguments[flag + 1]) {
            concurrency = max(1, value)
            arguments.removeSubrange(flag...(flag + 1))
        }
        guard arguments.count >= 2, let mode = Mode(rawValue: arguments[0]) else {
            print(
                "usage: haul-http-floor http|http-files|delegate|delegate-files|nio|nio-files|nio-async|nio-async-files LIST [FOLDER] [-j N]"
            )
            exit(64)
        }
        let folder = arguments.count > 2 ? arguments[2] : nil
        if [.httpFiles, .nioFiles, .nioAsyncFiles, .delegateFiles].contains(mode) {
            guard let folder else {
                print("\(mode.rawValue) needs a FOLDER")
                exit(64)
            }
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }
        let urls = try String(contentsOfFile: arguments[1], encoding: .utf8)
            .split(whereSeparator: \.isNewline).map(String.init)

        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(10), read: .seconds(30)),
            decompression: .disabled
        )
        configuration.tracing.tracer = nil
        configuration.httpVersion = .http1Only
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = concurrency
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)

        if [.nio, .nioFiles, .nioAsync, .nioAsyncFiles].contains(mode) {
            let cpuBefore = Self.cpuMilliseconds()
            let start = ContinuousClock.now
            let files = mode == .nioFiles || mode == .nioAsyncFiles ? folder : nil
            let bytes =
                mode == .nio || mode == .nioFiles
                ? try await fetchRaw(urls, concurrency: concurrency, folder: files)
                : try await fetchRawAsync(urls, concurrency: concurrency, folder: files)
            let wall = (ContinuousClock.now - start) / .seconds(1)
            let cpu = Self.cpuMilliseconds() - cpuBefore
            print("\(mode.rawValue) wall \(wall) cpu_ms \(Int(cpu)) requests \(urls.count) bytes \(bytes)")
            return
        }
        let nextIndex = NIOLockedValueBox(0)
        let totalBytes = NIOLockedValueBox(0)
        let cpuBefore = Self.cpuMilliseconds()
        let start = ContinuousClock.now
        do {
            if taskPerRequest {
                try await Self.runTaskPerRequest(count: urls.count, concurrency: concurrency) { index in
                    let bytes = try await fetch(urls[index], index: index, mode: mode, client: client, folder: folder)
                    totalBytes.withLockedValue { $0 += bytes }
                }
            } else {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<concurrency {
                        group.addTask {
                            while true {
                                let index = nextIndex.withLockedValue { next in
                                    defer { next += 1 }
                                    return next
                                }
                                guard index < urls.count else { return }
                                let bytes = try await fetch(
                                    urls[index],
                                    index: index,
                                    mode: mode,
                                    client: client,
                                    folder: folder
                                )
                                totalBytes.withLockedValue { $0 += bytes }
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        let wall = (ContinuousClock.now - start) / .seconds(1)
        let cpu = Self.cpuMilliseconds() - cpuBefore
        try await client.shutdown()
        print(
            "\(mode.rawValue) wall \(wall) cpu_ms \(Int(cpu)) requests \(urls.count) bytes \(totalBytes.withLockedValue { $0 })"
        )
    }

    /// Runs `fetch` for each index in a detached task of its own, `concurrency` at a time, each ending task starting
    /// the next: a task per file, as Haul's manager runs its transfers.
    static func runTaskPerRequest(
        count: Int,
        concurrency: Int,
        _ fetch: @escaping @Sendable (Int) async throws -> Void
    ) async throws {
        let next = NIOLockedValueBox(0)
        let remaining = NIOLockedValueBox(count)
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            let resumed = NIOLockedValueBox(count == 0)
            if count == 0 { done.resume() }
            @Sendable func finish(_ result: Result<Void, any Error>) {
                let first = resumed.withLockedValue { resumed in
                    defer { resumed = true }
                    return !resumed
                }
                if first { done.resume(with: result) }
            }
            @Sendable func spawn() {
                let index = next.withLockedValue { next in
                    defer { next += 1 }
                    return next
                }
                guard index < count else { return }
                Task.detached {
                    do {
                        try await fetch(index)
                    } catch {
                        return finish(.failure(error))
                    }
                    if remaining.withLockedValue({ left in
                        left -= 1
                        return left
                    }) == 0 {
                        finish(.success(()))
                    }
                    spawn()
                }
            }
            for _ in 0..<concurrency { spawn() }
        }
    }

    static func cpuMilliseconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func milliseconds(_ time: timeval) -> Double { Double(time.tv_sec) * 1000 + Double(time.tv_usec) / 1000 }
        return milliseconds(usage.ru_utime) + milliseconds(usage.ru_stime)
    }
}
