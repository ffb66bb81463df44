import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import Testing

@testable import Haul

@Suite("A plain-http connection's exchanges")
struct HTTP1ConnectionStateMachineTests {
    typealias Machine = HTTP1Connection.StateMachine

    /// A machine that has carried `served` exchanges and is idle again.
    func machine(served: Int) -> Machine {
        var machine = Machine()
        for _ in 0..<served {
            _ = machine.requestStarted()
            _ = machine.headReceived(keepAlive: true)
            _ = machine.endReceived(isActive: true)
        }
        return machine
    }

    @Test func anExchangeSendsDeliversAndGivesAKeptAliveConnectionBack() {
        var machine = Machine()
        #expect(machine.requestStarted() == .sendRequest)
        #expect(machine.headReceived(keepAlive: true) == .deliver)
        #expect(machine.bodyReceived() == .deliver)
        #expect(machine.bodyReceived() == .deliver)
        #expect(machine.endReceived(isActive: true) == .finishExchange(reuse: true))
        #expect(machine.state == .idle(served: 1))
    }

    @Test func aResponseThatDoesNotKeepTheConnectionAliveClosesIt() {
        var machine = Machine()
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: false)
        #expect(machine.endReceived(isActive: true) == .finishExchange(reuse: false))
        #expect(machine.state == .closed)
    }

    @Test func aBodyThatEndedWithTheConnectionIsNotReused() {
        var machine = Machine()
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: true)
        #expect(machine.endReceived(isActive: false) == .finishExchange(reuse: false))
        #expect(machine.connectionClosed() == .none)
    }

    @Test func aReusedConnectionClosedBeforeTheHeadAsksForAnotherConnection() {
        var machine = self.machine(served: 2)
        #expect(machine.requestStarted() == .sendRequest)
        #expect(machine.connectionClosed() == .failExchange(.closedBeforeResponseOnReusedConnection))
        #expect(machine.state == .closed)
    }

    @Test func aNewConnectionClosedBeforeTheHeadFailsTheExchange() {
        var machine = Machine()
        _ = machine.requestStarted()
        #expect(machine.connectionClosed() == .failExchange(.closedBeforeEnd))
    }

    @Test func aConnectionClosedDuringTheBodyFailsTheExchange() {
        var machine = self.machine(served: 1)
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: true)
        _ = machine.bodyReceived()
        #expect(machine.connectionClosed() == .failExchange(.closedBeforeEnd))
    }

    @Test func silenceFailsAnExchangeAndClosesAnIdleConnection() {
        var waiting = Machine()
        _ = waiting.requestStarted()
        #expect(waiting.readTimedOut() == .failExchange(.timedOut))
        var receiving = Machine()
        _ = receiving.requestStarted()
        _ = receiving.headReceived(keepAlive: true)
        #expect(receiving.readTimedOut() == .failExchange(.timedOut))
        var idle = self.machine(served: 1)
        #expect(idle.readTimedOut() == .close)
        #expect(idle.state == .closed)
    }

    @Test func anErrorFailsTheExchangeOnceAndLaterEventsAreIgnored() {
        var machine = Machine()
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: true)
        #expect(machine.errorOccurred() == .failExchange(.error))
        #expect(machine.errorOccurred() == .none)
        #expect(machine.bodyReceived() == .none)
        #expect(machine.endReceived(isActive: true) == .none)
        #expect(machine.connectionClosed() == .none)
    }

    @Test func aRequestOnAClosedConnectionIsRefusedForAnotherConnection() {
        var machine = Machine()
        _ = machine.connectionClosed()
        #expect(machine.requestStarted() == .refuseRequest)
    }

    @Test func aResponseNobodyAskedForClosesTheConnection() {
        var idle = self.machine(served: 1)
        #expect(idle.headReceived(keepAlive: true) == .close)
        var bodyWhileIdle = Machine()
        #expect(bodyWhileIdle.bodyReceived() == .close)
        var endWhileWaiting = Machine()
        _ = endWhileWaiting.requestStarted()
        #expect(endWhileWaiting.endReceived(isActive: true) == .close)
    }
}

@Suite("A plain-http request's head")
struct HTTP1RequestHeadTests {
    func head(_ url: String, _ headers: [(name: String, value: String)] = []) throws -> (uri: String, host: [String]) {
        let url = URL(string: url)!
        let head = try ConnectionPool.requestHead(url, origin: ConnectionPool.Origin(url), headers: headers)
        #expect(head.method == .GET)
        #expect(head.version == .http1_1)
        return (head.uri, head.headers["host"])
    }

    @Test func keepsThePathAndQueryAsWritten() throws {
        #expect(try self.head("http://example.com/a%20b/c%2Fd?x=1%2F2&y").uri == "/a%20b/c%2Fd?x=1%2F2&y")
        #expect(try self.head("http://example.com/photos/1.jpg").uri == "/photos/1.jpg")
    }

    @Test func asksForTheRootWhenTheURLHasNoPath() throws {
        #expect(try self.head("http://example.com").uri == "/")
        #expect(try self.head("http://example.com?q=1").uri == "/?q=1")
    }

    @Test func leavesTheFragmentOut() throws {
        #expect(try self.head("http://example.com/a#part").uri == "/a")
    }

    @Test func namesTheHostWithItsPortUnlessItIsEighty() throws {
        #expect(try self.head("http://Example.COM/a").host == ["example.com"])
        #expect(try self.head("http://example.com:8080/a").host == ["example.com:8080"])
        #expect(try self.head("http://127.0.0.1:80/a").host == ["127.0.0.1"])
    }

    @Test func bracketsAnIPv6Host() throws {
        #expect(try self.head("http://[::1]:8080/a").host == ["[::1]:8080"])
    }

    @Test func keepsTheCallersOwnHostHeader() throws {
        #expect(try self.head("http://127.0.0.1/a", [("Host", "files.example.com")]).host == ["files.example.com"])
        #expect(try self.head("http://127.0.0.1/a", [("hOST", "files.example.com")]).host == ["files.example.com"])
        for other in ["Hose", "Hosts", "Ho5t"] {
            #expect(try self.head("http://127.0.0.1/a", [(other, "x")]).host == ["127.0.0.1"], "\(other) is not Host")
        }
    }

    @Test func refusesAFieldThatCouldEndItsLineOrANameThatIsNotAToken() throws {
        let url = "http://example.com/f"
        for value in ["a\r\nX-Injected: 1", "a\nb", "a\rb", "nul\u{0}", "bell\u{7}", "delete\u{7F}"] {
            #expect(throws: HaulError.self, "\(value.debugDescription)") { try self.head(url, [("X-A", value)]) }
        }
        for name in ["", "X A", "X:A", "X\r\nY", "é"] {
            #expect(throws: HaulError.self, "\(name.debugDescription)") { try self.head(url, [(name, "1")]) }
        }
        let error = #expect(throws: HaulError.self) { try self.head(url, [("X-A", "a\r\nX-Injected: 1")]) }
        #expect(error?.code == .invalidRequest)
        #expect(error?.message == "The value of the header \"X-A\" has a control character")
        // A tab, text past ASCII, and every punctuation a token may hold go out as they are.
        _ = try self.head(url, [("X-A", "tab\there"), ("X-B", "naïve café"), ("!#$%&'*+-.^_`|~09azAZ", "1")])
    }

    @Test func checksTheTargetForSpacesAndControlCharacters() {
        #expect(RequestCheck.isValidTarget("/a%20b?x=1"))
        #expect(!RequestCheck.isValidTarget("/a b"))
        #expect(!RequestCheck.isValidTarget("/a\r\nX: 1"))
        #expect(!RequestCheck.isValidTarget("/é"))
        #expect(!RequestCheck.isValidTarget(""))
    }
}

@Suite("A plain-http request's bytes")
struct HTTP1RequestEncoderTests {
    @Test func writesTheHeadAsOneBuffer() {
        var fields = HTTPHeaders()
        fields.add(name: "Host", value: "127.0.0.1:8080")
        fields.add(name: "User-Agent", value: "haul/1")
        fields.add(name: "X-B", value: "naïve\tcafé")
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/a%20b?x=1", headers: fields)
        let written = HTTP1RequestEncoder().encode(head, allocator: ByteBufferAllocator())
        #expect(
            String(buffer: written)
                == "GET /a%20b?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: haul/1\r\nX-B: naïve\tcafé\r\n\r\n"
        )
    }

    @Test func writesEachHeadInFullWhenItsBufferIsReusedOrStillHeld() throws {
        let encoder = HTTP1RequestEncoder()
        let allocator = ByteBufferAllocator()
        var fields = HTTPHeaders()
        fields.add(name: "Host", value: "h")
        let long = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/" + String(repeating: "x", count: 300))
        let short = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/s", headers: fields)
        let first = encoder.encode(long, allocator: allocator)
        let second = encoder.encode(short, allocator: allocator)
        #expect(
            String(buffer: first) == "GET /\(String(repeating: "x", count: 300)) HTTP/1.1\r\n\r\n",
            "held: not overwritten"
        )
        #expect(String(buffer: second) == "GET /s HTTP/1.1\r\nHost: h\r\n\r\n")
        let third = encoder.encode(long, allocator: allocator)
        #expect(String(buffer: third) == String(buffer: first))
        let old = HTTPRequestHead(version: .http1_0, method: .GET, uri: "/")
        #expect(String(buffer: encoder.encode(old, allocator: allocator)) == "GET / HTTP/1.0\r\n\r\n")
    }
}

@Suite("Which URLs go on Haul's own connections")
struct ConnectionPoolAvailabilityTests {
    @Test func isUsedOnlyWhereSwiftNIOsSocketsRunOnTheClientsLoops() {
        // On Apple platforms AsyncHTTPClient's loops are Network.framework's; an embedded loop stands in for them here.
        let url = URL(string: "http://example.com/a")!
        let posix = ConnectionPool(group: MultiThreadedEventLoopGroup.singleton, configuration: .init())
        #expect(posix.isAvailable)
        #expect(posix.handles(url))
        let other = ConnectionPool(group: EmbeddedEventLoop(), configuration: .init())
        #expect(!other.isAvailable)
        #expect(!other.handles(url))
    }

    @Test func takesHTTPWithoutCredentialsOnly() {
        #expect(ConnectionPool.handles(URL(string: "http://example.com/a")!))
        #expect(ConnectionPool.handles(URL(string: "HTTP://example.com/a")!))
        #expect(!ConnectionPool.handles(URL(string: "https://example.com/a")!))
        #expect(!ConnectionPool.handles(URL(string: "http://user:secret@example.com/a")!))
    }

    @Test func aURLsOriginIsWorkedOutAgainWheneverItsSchemeOrAuthorityDiffersFromTheLastOnes() {
        // Each URL against the one before it: the same authority, other credentials, another scheme, port or host,
        // an IPv6 address, a host whose name starts like the last one's.
        let pool = ConnectionPool(group: MultiThreadedEventLoopGroup.singleton, configuration: .init())
        let cases: [(String, (host: String, port: Int)?)] = [
            ("http://Example.com/a", ("example.com", 80)),
            ("http://Example.com/b?c", ("example.com", 80)),
            ("http://user:secret@Example.com/a", nil),
            ("http://Example.com/a", ("example.com", 80)),
            ("https://Example.com/a", nil),
            ("http://Example.com:8080/a", ("example.com", 8080)),
            ("http://Example.com.evil:8080/a", ("example.com.evil", 8080)),
            ("http://[::1]:8080/a", ("::1", 8080)),
            ("http:/a", nil),
            ("http://127.0.0.1#x", ("127.0.0.1", 80)),
        ]
        for (text, expected) in cases {
            let url = URL(string: text)!
            let origin = pool.origin(of: url)
            #expect(origin?.host == expected?.host && origin?.port == expected?.port, "\(text)")
            #expect(pool.handles(url) == (expected != nil) && ConnectionPool.handles(url) == (expected != nil))
            if let origin { #expect(origin == ConnectionPool.Origin(url), "\(text)") }
        }
    }

    @Test func equalOriginsHashAlikeHoweverTheirURLsAreWritten() {
        let origins = ["http://Example.com/a", "http://example.com:80/b", "HTTP://EXAMPLE.COM"].map {
            ConnectionPool.Origin(URL(string: $0)!)
        }
        #expect(Set(origins).count == 1)
        #expect(origins.allSatisfy { $0.hashValue == origins[0].hashValue })
        let other = ConnectionPool.Origin(URL(string: "http://example.com:81/a")!)
        #expect(!Set(origins).contains(other))
        #expect([origins[0]: 1, other: 2][origins[2]] == 1)
    }
}

@Suite("An error page read or left")
struct ErrorPageLengthTests {
    func head(_ headers: [(String, String)]) -> HTTPResponseHead {
        HTTPResponseHead(version: .http1_1, status: .serviceUnavailable, headers: HTTPHeaders(headers))
    }

    @Test func readsAPageOfAKnownShortLength() {
        #expect(Download.hasShortBody(self.head([("Content-Length", "0")])))
        #expect(Download.hasShortBody(self.head([("Content-Length", "512")])))
        #expect(Download.hasShortBody(self.head([("Content-Length", "65536")])))
    }

    @Test func leavesALongPageOrOneOfUnknownLength() {
        #expect(!Download.hasShortBody(self.head([("Content-Length", "65537")])))
        #expect(!Download.hasShortBody(self.head([("Transfer-Encoding", "chunked")])))
        #expect(!Download.hasShortBody(self.head([])))
        #expect(!Download.hasShortBody(self.head([("Content-Length", "-1")])))
        #expect(!Download.hasShortBody(self.head([("Content-Length", "12abc")])))
    }
}
