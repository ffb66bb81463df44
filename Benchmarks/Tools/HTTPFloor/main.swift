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
//     swift build -c release --product haul-http-floor
//     .build/release/haul-http-floor MODE LIST [FOLDER] [-j N]
//
// MODE:
//   http        `execute(_:deadline:)` and the body iterated, bytes dropped (Haul's way of calling the client)
//   http-files  the same, each body written to FOLDER: created, written at explicit offsets, closed, renamed
//   delegate    the client's delegate API, the body handed to an async consumer through a small bridge (no
//               per-request timer: `execute(_:deadline:)` schedules and cancels one on an event loop per request)
//
// Prints one line: the mode, wall seconds, CPU milliseconds (user + system, `getrusage`), requests and bytes.
// Not part of `swift test`; see docs/benchmarks.md for what it measured.

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
    case http, httpFiles = "http-files", delegate
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
        let partial = "\(folder)/f\(index).part"
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw HTTPFloorError("cannot create \(partial): errno \(errno)") }
        defer { close(descriptor) }
        for try await part in response.body {
            let written = part.withUnsafeReadableBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(bytes)) }
            guard written == part.readableBytes else { throw HTTPFloorError("short write to \(partial)") }
            bytes += part.readableBytes
        }
        guard rename(partial, "\(folder)/f\(index)") == 0 else { throw HTTPFloorError("cannot rename \(partial)") }
    case .delegate:
        let bridge = AsyncBodyBridge()
        // The bridge hears the end and any error itself; awaiting the task's future as well costs another hand-off
        // per request (118 against 105 ms on 2,000 small files).
        _ = client.execute(request: try HTTPClient.Request(url: url), delegate: bridge)
        let head = try await bridge.head()
        guard head.status == .ok else { throw HTTPFloorError("\(url): \(head.status)") }
        while let part = try await bridge.next() { bytes += part.readableBytes }
    }
    return bytes
}

struct HTTPFloorError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

@main
enum HTTPFloor {
    static func main() async throws {
        var arguments = Array(CommandLine.arguments.dropFirst())
        var concurrency = 16
        if let flag = arguments.firstIndex(of: "-j"), flag + 1 < arguments.count, let value = Int(arguments[flag + 1]) {
            concurrency = max(1, value)
            arguments.removeSubrange(flag...(flag + 1))
        }
        guard arguments.count >= 2, let mode = Mode(rawValue: arguments[0]) else {
            print("usage: haul-http-floor http|http-files|delegate LIST [FOLDER] [-j N]")
            exit(64)
        }
        let folder = arguments.count > 2 ? arguments[2] : nil
        if mode == .httpFiles {
            guard let folder else {
                print("http-files needs a FOLDER")
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

        let nextIndex = NIOLockedValueBox(0)
        let totalBytes = NIOLockedValueBox(0)
        let cpuBefore = Self.cpuMilliseconds()
        let start = ContinuousClock.now
        do {
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

    static func cpuMilliseconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func milliseconds(_ time: timeval) -> Double { Double(time.tv_sec) * 1000 + Double(time.tv_usec) / 1000 }
        return milliseconds(usage.ru_utime) + milliseconds(usage.ru_stime)
    }
}
