import Foundation
import Haul
import HaulTesting
import Testing

/// Requests through an HTTP proxy (``ForwardProxy``): plain-http downloads on Haul's own connections, with the whole
/// URL as their target; https through a `CONNECT` tunnel that AsyncHTTPClient opens.
@Suite("Going through a proxy", .timeLimit(.minutes(2)))
struct ProxyTests {
    static let body = FaultInjectingServer.body(size: 150_000, seed: 47)
    static let resources: [String: FaultInjectingServer.Resource] = [
        "/a.bin": .init(body: Self.body), "/b.bin": .init(body: Self.body), "/c.bin": .init(body: Self.body),
    ]

    func download(
        _ urls: [URL],
        proxies: ProxySettings,
        into folder: URL,
        adjusting adjust: (inout TransferManager.Configuration) throws -> Void = { _ in }
    ) async throws -> BatchReport {
        var configuration = TransferManager.Configuration.testing(concurrent: 2)
        configuration.proxies = proxies
        try adjust(&configuration)
        return try await TransferManager.withTransferManager(configuration: configuration) { manager in
            try await manager.download(urls, into: folder)
        }
    }

    @Test func plainHTTPAsksTheProxyForTheWholeURLWithItsCredentials() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources) { server in
            try await ForwardProxy.withProxy(credentials: ("ann", "s3cret:!")) { proxy in
                try await withTemporaryDirectory { folder in
                    let urls = ["/a.bin", "/b.bin", "/c.bin"].map { server.url($0) }
                    let settings = ProxySettings(
                        all: try Proxy(parsing: proxy.url(user: "ann", password: "s3cret%3A!"))
                    )
                    let report = try await self.download(urls, proxies: settings, into: folder)
                    #expect(report.completed.count == 3, "\(report.failed.map(\.error.message))")
                    for name in ["a.bin", "b.bin", "c.bin"] {
                        let arrived = contents(of: folder.appending(path: name)) == Self.body
                        #expect(arrived, "\(name)")
                    }
                    let asked = proxy.requests
                    #expect(Set(asked.map(\.target)) == Set(urls.map(\.absoluteString)))
                    #expect(asked.allSatisfy { $0.method == "GET" })
                    let expected = "Basic " + Data("ann:s3cret:!".utf8).base64EncodedString()
                    #expect(asked.allSatisfy { $0.headers["proxy-authorization"] == expected })
                    #expect(asked.allSatisfy { $0.headers["host"] == "127.0.0.1:\(server.port)" })
                    #expect(server.requests.count == 3)
                    #expect(server.requests.allSatisfy { $0.headers["proxy-authorization"] == nil })
                }
            }
        }
    }

    @Test func httpsGoesThroughATunnelTheProxyOpens() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources, tls: true) { server in
            try await ForwardProxy.withProxy { proxy in
                try await withTemporaryDirectory { folder in
                    let authority = folder.appending(path: "authority.pem")
                    try Data(TestCertificates.authority.utf8).write(to: authority)
                    let out = folder.appending(path: "out")
                    try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
                    let settings = ProxySettings(https: try Proxy(parsing: proxy.url()))
                    let report = try await self.download([server.url("/a.bin")], proxies: settings, into: out) {
                        $0.additionalTrustedCertificates = [authority]
                    }
                    #expect(report.completed.count == 1, "\(report.failed.map(\.error.message))")
                    let arrived = contents(of: out.appending(path: "a.bin")) == Self.body
                    #expect(arrived)
                    #expect(proxy.requests.map(\.method) == ["CONNECT"])
                    #expect(proxy.requests.first?.target == "127.0.0.1:\(server.port)")
                }
            }
        }
    }

    @Test func uploadsAndDeletionsGoThroughATunnelToo() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources) { server in
            try await ForwardProxy.withProxy { proxy in
                try await withTemporaryDirectory { folder in
                    let file = folder.appending(path: "up.bin")
                    try Data(Self.body).write(to: file)
                    var configuration = TransferManager.Configuration.testing()
                    configuration.proxies = ProxySettings(all: try Proxy(parsing: proxy.url()))
                    let report = try await TransferManager.withTransferManager(configuration: configuration) {
                        manager in
                        try await manager.enqueue([
                            .upload(file: file, to: server.url("/up.bin")), .delete(server.url("/c.bin")),
                        ])
                        .report()
                    }
                    #expect(report.isSuccess, "\(report.failed.map(\.error.message))")
                    let uploaded = server.uploads["/up.bin"]?.body == Self.body
                    #expect(uploaded)
                    #expect(proxy.requests.map(\.method) == ["CONNECT", "CONNECT"])
                    #expect(Set(server.requests.map(\.method)) == ["PUT", "DELETE"])
                }
            }
        }
    }

    @Test func hostsListedToBypassTheProxyAreReachedDirectly() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources) { server in
            try await ForwardProxy.withProxy { proxy in
                try await withTemporaryDirectory { folder in
                    let settings = ProxySettings(
                        all: try Proxy(parsing: proxy.url()),
                        bypass: ["localhost", "127.0.0.1"]
                    )
                    let report = try await self.download([server.url("/a.bin")], proxies: settings, into: folder)
                    #expect(report.completed.count == 1)
                    #expect(proxy.requests.isEmpty)
                    #expect(server.requests.count == 1)
                }
            }
        }
    }

    @Test func aProxyThatWantsCredentialsSaysSoAndIsNotAskedAgain() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources) { server in
            try await FaultInjectingServer.withServer(resources: Self.resources, tls: true) { secure in
                try await ForwardProxy.withProxy(credentials: ("ann", "pw")) { proxy in
                    try await withTemporaryDirectory { folder in
                        let urls = [server.url("/a.bin"), secure.url("/b.bin")]
                        let settings = ProxySettings(all: try Proxy(parsing: proxy.url()))
                        let report = try await self.download(urls, proxies: settings, into: folder) {
                            $0.verifiesCertificates = false
                        }
                        #expect(report.failed.count == 2)
                        for (item, error) in report.failed {
                            #expect(error.message.hasPrefix("The proxy asked for credentials (407"), "\(error)")
                            #expect(item.attempts == 1, "credentials do not appear on a retry")
                        }
                        #expect(server.requests.isEmpty && secure.requests.isEmpty)
                        #expect(names(in: folder).isEmpty)
                    }
                }
            }
        }
    }

    @Test func aProxyThatCannotBeReachedIsNamedInTheFailure() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources) { server in
            try await FaultInjectingServer.withRefusingPort { port in
                try await withTemporaryDirectory { folder in
                    let settings = ProxySettings(all: Proxy(host: "127.0.0.1", port: port))
                    let report = try await self.download([server.url("/a.bin")], proxies: settings, into: folder) {
                        $0.retryPolicy.maximumAttempts = 1
                    }
                    let error = try #require(report.failed.first?.error)
                    #expect(error.code == .connectionFailed)
                    #expect(error.message.hasPrefix("The proxy 127.0.0.1:\(port): Could not connect"), "\(error)")
                    #expect(server.requests.isEmpty)
                }
            }
        }
    }
}

@Suite("Sending each host its login", .timeLimit(.minutes(2)))
struct HostLoginTests {
    @Test func eachHostGetsItsOwnLoginAndCookiesAcrossARedirectAndARequestsOwnAuthorizationWins() async throws {
        let body = FaultInjectingServer.body(size: 20_000, seed: 5)
        try await FaultInjectingServer.withServer(host: "127.0.0.2", resources: ["/b.bin": .init(body: body)]) {
            second in
            let resources: [String: FaultInjectingServer.Resource] = [
                "/a.bin": .init(
                    body: body,
                    faults: [.redirect(status: 302, location: second.url("/b.bin").absoluteString)]
                ),
                "/own.bin": .init(body: body),
            ]
            try await FaultInjectingServer.withServer(resources: resources) { first in
                try await withTemporaryDirectory { folder in
                    var configuration = TransferManager.Configuration.testing()
                    configuration.hostCredentials = try HostCredentials(
                        netrc: "machine 127.0.0.1 login ann password one\nmachine 127.0.0.2 login bob password two"
                    )
                    configuration.cookies = CookieStorage(
                        CookieJar(cookies: [.init(domain: "127.0.0.2", name: "s", value: "2")])
                    )
                    let report = try await TransferManager.withTransferManager(configuration: configuration) {
                        manager in
                        try await manager.enqueue([
                            TransferRequest(url: first.url("/a.bin"), destination: .folder(folder)),
                            TransferRequest(
                                url: first.url("/own.bin"),
                                destination: .folder(folder),
                                headers: [("Authorization", "Bearer mine")]
                            ),
                        ])
                        .report()
                    }
                    #expect(report.isSuccess, "\(report.failed.map(\.error.message))")
                    let ann = "Basic " + Data("ann:one".utf8).base64EncodedString()
                    let bob = "Basic " + Data("bob:two".utf8).base64EncodedString()
                    let byPath = Dictionary(first.requests.map { ($0.path, $0.headers["authorization"]) }) { a, _ in a }
                    #expect(byPath["/a.bin"] == ann)
                    #expect(byPath["/own.bin"] == "Bearer mine")
                    #expect(second.requests.map { $0.headers["authorization"] } == [bob], "not ann's")
                    #expect(first.requests.allSatisfy { $0.headers["cookie"] == nil })
                    #expect(second.requests.map { $0.headers["cookie"] } == ["s=2"])
                }
            }
        }
    }
}

@Suite("Keeping the cookies servers set", .timeLimit(.minutes(2)))
struct ServerCookieTests {
    @Test func aCookieOneResponseSetsGoesWithTheLaterRequestsItMatches() async throws {
        let body = FaultInjectingServer.body(size: 10_000, seed: 9)
        let resources: [String: FaultInjectingServer.Resource] = [
            "/login/a.bin": .init(body: body, faults: [.addHeaders(["Set-Cookie": "session=abc; Path=/; HttpOnly"])]),
            "/b.bin": .init(body: body),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing(concurrent: 1)
                let storage = CookieStorage()
                configuration.cookies = storage
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download([server.url("/login/a.bin"), server.url("/b.bin")], into: folder)
                }
                #expect(report.isSuccess)
                let sent = Dictionary(server.requests.map { ($0.path, $0.headers["cookie"]) }) { a, _ in a }
                #expect(sent["/login/a.bin"] == .some(nil))
                #expect(sent["/b.bin"] == "session=abc")
                #expect(storage.jar.cookies.map(\.name) == ["session"])

                var ignoring = TransferManager.Configuration.testing(concurrent: 1)
                ignoring.cookies = CookieStorage(acceptsServerCookies: false)
                _ = try await TransferManager.withTransferManager(configuration: ignoring) { manager in
                    try await manager.download([server.url("/login/a.bin")], into: folder)
                }
                #expect(ignoring.cookies?.jar.isEmpty == true)
            }
        }
    }

    /// The flow of a data archive behind a login (NASA Earthdata's, as wget and curl are told to follow it): the file
    /// redirects to the login host, which takes the netrc login and redirects to the archive's callback, which sets
    /// a session cookie and redirects back to the file; the next file is served on the cookie alone.
    @Test func aLoginThatRedirectsAndSetsASessionCookieServesTheNextFilesOnThatCookie() async throws {
        let body = FaultInjectingServer.body(size: 30_000, seed: 21)
        try await FaultInjectingServer.withServer(host: "127.0.0.2") { login in
            try await FaultInjectingServer.withServer { archive in
                login.setResource(
                    .init(
                        body: [],
                        faults: [.redirect(status: 302, location: archive.url("/callback").absoluteString)]
                    ),
                    at: "/oauth"
                )
                archive.setResource(
                    .init(
                        body: [],
                        faults: [
                            .redirectWithFields(
                                status: 302,
                                location: archive.url("/data/1.bin").absoluteString,
                                fields: ["Set-Cookie": "archive_session=s3ss; Path=/; HttpOnly"]
                            )
                        ]
                    ),
                    at: "/callback"
                )
                archive.setResource(
                    .init(body: body, faults: [.redirect(status: 302, location: login.url("/oauth").absoluteString)]),
                    at: "/data/1.bin"
                )
                archive.setResource(.init(body: body), at: "/data/2.bin")
                try await withTemporaryDirectory { folder in
                    var configuration = TransferManager.Configuration.testing(concurrent: 1)
                    configuration.hostCredentials = try HostCredentials(
                        netrc: "machine 127.0.0.2 login ann password pw"
                    )
                    configuration.cookies = CookieStorage()
                    let report = try await TransferManager.withTransferManager(configuration: configuration) {
                        manager in
                        try await manager.download(
                            [archive.url("/data/1.bin"), archive.url("/data/2.bin")],
                            into: folder
                        )
                    }
                    #expect(report.isSuccess, "\(report.failed.map(\.error.message))")
                    let logins = login.requests.map { $0.headers["authorization"] }
                    #expect(logins == ["Basic " + Data("ann:pw".utf8).base64EncodedString()])
                    let archiveRequests = archive.requests.map { "\($0.path) \($0.headers["cookie"] ?? "-")" }
                    #expect(
                        archiveRequests == [
                            "/data/1.bin -", "/callback -", "/data/1.bin archive_session=s3ss",
                            "/data/2.bin archive_session=s3ss",
                        ]
                    )
                    #expect(archive.requests.allSatisfy { $0.headers["authorization"] == nil }, "the login stays home")
                }
            }
        }
    }
}
