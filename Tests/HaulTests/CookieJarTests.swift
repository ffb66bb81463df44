import Foundation
import Testing

@testable import Haul

@Suite("Sending cookies from a cookie file")
struct CookieJarTests {
    static let file = """
        # Netscape HTTP Cookie File
        .example.com\tTRUE\t/\tFALSE\t0\tsession\ts1
        files.example.com\tFALSE\t/data\tTRUE\t4102444800\ttoken\tt1
        #HttpOnly_files.example.com\tFALSE\t/data/deep\tFALSE\t4102444800\tdeep\td1
        old.example.com\tFALSE\t/\tFALSE\t1000\tgone\tx

        other.example\tFALSE\t/\tFALSE\t0\tempty\t
        """

    func header(_ url: String) throws -> String? {
        try CookieJar(netscape: Self.file).header(for: URL(string: url)!)
    }

    @Test func sendsTheCookiesWhoseDomainPathSchemeAndExpiryMatchLongerPathsFirst() throws {
        #expect(try self.header("https://files.example.com/data/deep/x.bin") == "deep=d1; token=t1; session=s1")
        #expect(try self.header("http://files.example.com/data/x.bin") == "session=s1", "token is https only")
        #expect(try self.header("https://files.example.com/database") == "session=s1", "/data is not /database")
        #expect(try self.header("http://example.com/") == "session=s1")
        #expect(try self.header("http://notexample.com/") == nil)
        #expect(try self.header("http://old.example.com/") == "session=s1", "an expired cookie is dropped")
        #expect(try self.header("http://other.example/") == "empty=")
    }

    @Test func aRequestsOwnCookieHeaderWins() throws {
        let jar = try CookieJar(netscape: Self.file)
        let url = URL(string: "http://example.com/a")!
        #expect(jar.adding(to: [("Cookie", "mine=1")], for: url).map(\.value) == ["mine=1"])
        #expect(jar.adding(to: [], for: url).map(\.value) == ["session=s1"])
    }

    @Test func keepsWhatASetCookieFieldSaysAsABrowserWould() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        var jar = CookieJar()
        let url = URL(string: "https://files.example.com/data/set/here.bin")!
        jar.take(setCookie: "a=1", from: url, now: now)
        jar.take(setCookie: "b=2; Domain=.example.com; Path=/; Secure; Max-Age=60", from: url, now: now)
        jar.take(setCookie: "c=3; Domain=other.example; Path=/", from: url, now: now)
        jar.take(setCookie: "d=4; Domain=com", from: url, now: now)
        jar.take(setCookie: "e=5; Expires=Wed, 21 Oct 2015 07:28:00 GMT", from: url, now: now)
        #expect(jar.cookies.map(\.name) == ["a", "b"], "another domain, a single label and the past are refused")
        let a = try #require(jar.cookies.first)
        #expect(a.domain == "files.example.com" && !a.includesSubdomains && a.path == "/data/set")
        let b = jar.cookies[1]
        #expect(b.includesSubdomains && b.isSecure && b.expires == 1_800_000_060)
        jar.take(setCookie: "a=changed; Path=/data/set", from: url, now: now)
        #expect(jar.cookies.filter { $0.name == "a" }.map(\.value) == ["changed"])
        jar.take(setCookie: "b=; Domain=example.com; Path=/; Max-Age=0", from: url, now: now)
        #expect(jar.cookies.map(\.name) == ["a"], "a cookie set to expire is removed")
    }

    @Test func writesAFileItReadsBackTheSame() throws {
        let jar = try CookieJar(netscape: Self.file, now: Date(timeIntervalSince1970: 2_000))
        #expect(try CookieJar(netscape: jar.netscapeText, now: Date(timeIntervalSince1970: 2_000)) == jar)
    }

    @Test func namesTheLineThatIsNotACookie() {
        #expect {
            try CookieJar(netscape: "# comment\nexample.com TRUE / FALSE 0 a b")
        } throws: { error in
            (error as? HaulError)?.message.hasPrefix("cookie file line 2: not a cookie") == true
        }
    }
}
