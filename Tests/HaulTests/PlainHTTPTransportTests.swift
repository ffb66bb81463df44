import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import Testing

@testable import Haul

@Suite("A plain-http request's head")
struct HTTP1RequestHeadTests {
    func head(_ url: String, _ headers: [(name: String, value: String)] = []) throws -> (uri: String, host: [String]) {
        let url = URL(string: url)!
        let head = try PlainHTTPTransport.requestHead(url, origin: PlainHTTPTransport.Origin(url), headers: headers)
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

@Suite("Which URLs go on Haul's own connections")
struct PlainHTTPTransportAvailabilityTests {
    @Test func isUsedOnlyWhereSwiftNIOsSocketsRunOnTheClientsLoops() {
        // On Apple platforms AsyncHTTPClient's loops are Network.framework's; an embedded loop stands in for them here.
        let url = URL(string: "http://example.com/a")!
        let posix = PlainHTTPTransport(group: MultiThreadedEventLoopGroup.singleton, configuration: .init())
        #expect(posix.isAvailable)
        #expect(posix.handles(url))
        let other = PlainHTTPTransport(group: EmbeddedEventLoop(), configuration: .init())
        #expect(!other.isAvailable)
        #expect(!other.handles(url))
    }

    @Test func takesHTTPWithoutCredentialsOnly() {
        #expect(PlainHTTPTransport.handles(URL(string: "http://example.com/a")!))
        #expect(PlainHTTPTransport.handles(URL(string: "HTTP://example.com/a")!))
        #expect(!PlainHTTPTransport.handles(URL(string: "https://example.com/a")!))
        #expect(!PlainHTTPTransport.handles(URL(string: "http://user:secret@example.com/a")!))
    }

    @Test func aURLsOriginIsWorkedOutAgainWheneverItsSchemeOrAuthorityDiffersFromTheLastOnes() {
        // Each URL against the one before it: the same authority, other credentials, another scheme, port or host,
        // an IPv6 address, a host whose name starts like the last one's.
        let pool = PlainHTTPTransport(group: MultiThreadedEventLoopGroup.singleton, configuration: .init())
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
            #expect(pool.handles(url) == (expected != nil) && PlainHTTPTransport.handles(url) == (expected != nil))
            if let origin { #expect(origin == PlainHTTPTransport.Origin(url), "\(text)") }
        }
    }

    @Test func equalOriginsHashAlikeHoweverTheirURLsAreWritten() {
        let origins = ["http://Example.com/a", "http://example.com:80/b", "HTTP://EXAMPLE.COM"].map {
            PlainHTTPTransport.Origin(URL(string: $0)!)
        }
        #expect(Set(origins).count == 1)
        #expect(origins.allSatisfy { $0.hashValue == origins[0].hashValue })
        let other = PlainHTTPTransport.Origin(URL(string: "http://example.com:81/a")!)
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
