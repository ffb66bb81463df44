import Foundation
import Testing

@testable import Haul

@Suite("Choosing a proxy")
struct ProxySettingsTests {
    @Test(arguments: [
        ("http://proxy.example:3128", Proxy(host: "proxy.example", port: 3128)),
        ("proxy.example:8080", Proxy(host: "proxy.example", port: 8080)),
        ("proxy.example", Proxy(host: "proxy.example", port: 1080)),
        ("HTTP://Proxy.Example/", Proxy(host: "proxy.example", port: 1080)),
        ("http://ann:p%40ss@10.0.0.1:3128", Proxy(host: "10.0.0.1", port: 3128, username: "ann", password: "p@ss")),
        ("http://[::1]:3128", Proxy(host: "::1", port: 3128)),
    ])
    func readsAProxyWrittenAsCurlTakesIt(text: String, expected: Proxy) throws {
        #expect(try Proxy(parsing: text) == expected)
    }

    @Test(arguments: [
        ("socks5://proxy.example:1080", "Only http:// proxies"),
        ("https://proxy.example:443", "Only http:// proxies"),
        ("http://proxy.example:3128/path", "A proxy is written"),
        ("http://", "A proxy is written"),
    ])
    func refusesWhatItCannotUseAndSaysWhy(text: String, message: String) {
        #expect {
            try Proxy(parsing: text)
        } throws: { error in
            (error as? HaulError)?.message.hasPrefix(message) == true
        }
    }

    @Test func sendsCredentialsAsBasicAuthorization() throws {
        #expect(try Proxy(parsing: "http://ann:pw@p:1").authorization == "Basic YW5uOnB3")
        #expect(try Proxy(parsing: "http://p:1").authorization == nil)
    }

    @Test func readsTheEnvironmentAsCurlDoes() throws {
        let settings = try ProxySettings(environment: [
            "http_proxy": "http://plain:3128",
            "HTTP_PROXY": "http://ignored:1",
            "HTTPS_PROXY": "secure:3129",
            "NO_PROXY": " .internal.example, 10.1.2.3 ,",
        ])
        #expect(settings.http == Proxy(host: "plain", port: 3128))
        #expect(settings.https == Proxy(host: "secure", port: 3129))
        #expect(settings.bypass == [".internal.example", "10.1.2.3"])

        let all = try ProxySettings(environment: ["all_proxy": "http://every:8080", "https_proxy": ""])
        #expect(all.http == Proxy(host: "every", port: 8080))
        #expect(all.https == Proxy(host: "every", port: 8080), "an empty variable is not set")
        #expect(try ProxySettings(environment: ["HTTP_PROXY": "http://cgi:1"]).http == nil)
        #expect(try ProxySettings(environment: [:]).isEmpty)
    }

    @Test func namesTheVariableThatHoldsABadProxy() {
        #expect {
            try ProxySettings(environment: ["https_proxy": "socks5://x:1"])
        } throws: { error in
            (error as? HaulError)?.message.hasPrefix("https_proxy: Only http:// proxies") == true
        }
    }

    @Test func aBypassedHostOrDomainGoesDirectlyAndOthersThroughTheProxyOfTheirScheme() throws {
        let plain = Proxy(host: "plain", port: 1)
        let secure = Proxy(host: "secure", port: 2)
        let settings = ProxySettings(http: plain, https: secure, bypass: ["example.com", ".corp", "10.0.0.7", "[::1]"])
        func proxy(_ url: String) -> Proxy? { settings.proxy(for: URL(string: url)!) }
        #expect(proxy("http://example.com/a") == nil)
        #expect(proxy("https://files.example.com/a") == nil)
        #expect(proxy("http://notexample.com/a") == plain, "a suffix of the name is not its domain")
        #expect(proxy("https://build.corp:8443/a") == nil)
        #expect(proxy("http://10.0.0.7:8080/a") == nil)
        #expect(proxy("http://[::1]:8080/a") == nil)
        #expect(proxy("http://10.0.0.8/a") == plain)
        #expect(proxy("https://other.example/a") == secure)
        #expect(ProxySettings(all: plain, bypass: ["*"]).proxy(for: URL(string: "http://any/a")!) == nil)
        #expect(ProxySettings(https: secure).proxy(for: URL(string: "http://any/a")!) == nil)
    }
}
