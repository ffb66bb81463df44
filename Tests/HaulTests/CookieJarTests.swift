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

    @Test func namesTheLineThatIsNotACookie() {
        #expect {
            try CookieJar(netscape: "# comment\nexample.com TRUE / FALSE 0 a b")
        } throws: { error in
            (error as? HaulError)?.message.hasPrefix("cookie file line 2: not a cookie") == true
        }
    }
}
