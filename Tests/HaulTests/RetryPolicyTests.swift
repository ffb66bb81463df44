import AsyncHTTPClient
import Foundation
import NIOHTTP1
import Testing

@testable import Haul

@Suite("Deciding about retries")
struct RetryPolicyTests {
    let unavailable = HaulError(.httpStatus, "503", httpStatus: 503)

    @Test func followsTheDocumentedTableOfDelays() {
        let policy = RetryPolicy()
        // random = 0 gives the full delay, random = 1 the most jitter takes off.
        #expect(policy.delay(afterAttempt: 1, failingWith: self.unavailable, retryAfter: nil, random: 0) == .seconds(1))
        #expect(
            policy.delay(afterAttempt: 1, failingWith: self.unavailable, retryAfter: nil, random: 1)
                == .milliseconds(500)
        )
        #expect(policy.delay(afterAttempt: 2, failingWith: self.unavailable, retryAfter: nil, random: 0) == .seconds(2))
        #expect(policy.delay(afterAttempt: 3, failingWith: self.unavailable, retryAfter: nil, random: 0) == .seconds(4))
        #expect(policy.delay(afterAttempt: 4, failingWith: self.unavailable, retryAfter: nil, random: 0) == .seconds(8))
        #expect(policy.delay(afterAttempt: 5, failingWith: self.unavailable, retryAfter: nil, random: 0) == nil)
    }

    @Test func capsTheExponentialDelay() {
        var policy = RetryPolicy()
        policy.maximumAttempts = 20
        #expect(
            policy.delay(afterAttempt: 15, failingWith: self.unavailable, retryAfter: nil, random: 0) == .seconds(30)
        )
    }

    @Test func prefersRetryAfterUpToItsCap() {
        let policy = RetryPolicy()
        #expect(
            policy.delay(afterAttempt: 1, failingWith: self.unavailable, retryAfter: .seconds(7), random: 1)
                == .seconds(7)
        )
        #expect(
            policy.delay(afterAttempt: 1, failingWith: self.unavailable, retryAfter: .seconds(9999), random: 0)
                == .seconds(300)
        )
    }

    @Test(arguments: [408, 429, 500, 502, 503, 504])
    func retriesTransientStatuses(status: Int) {
        #expect(RetryPolicy.isTransient(HaulError(.httpStatus, "", httpStatus: status)))
    }

    @Test(arguments: [400, 401, 403, 404, 410, 416, 501])
    func doesNotRetryPermanentStatuses(status: Int) {
        #expect(!RetryPolicy.isTransient(HaulError(.httpStatus, "", httpStatus: status)))
    }

    @Test func retriesNetworkFailuresButNotVerificationOrDiskFailures() {
        #expect(RetryPolicy.isTransient(HaulError(.connectionFailed, "")))
        #expect(RetryPolicy.isTransient(HaulError(.timedOut, "")))
        #expect(RetryPolicy.isTransient(HaulError(.incompleteBody, "")))
        #expect(!RetryPolicy.isTransient(HaulError(.checksumMismatch, "")))
        #expect(!RetryPolicy.isTransient(HaulError(.fileSystem, "")))
        #expect(!RetryPolicy.isTransient(HaulError(.invalidRequest, "")))
        #expect(!RetryPolicy.isTransient(HaulError(.redirectRefused, "")))
    }

    @Test func parsesRetryAfterInSecondsAndAsAnHTTPDate() {
        let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(RetryAfter.delay("120", now: now) == .seconds(120))
        #expect(RetryAfter.delay("Sun, 06 Nov 1994 08:50:37 GMT", now: now) == .seconds(60))
        #expect(RetryAfter.delay("Sunday, 06-Nov-94 08:50:37 GMT", now: now) == .seconds(60))
        #expect(RetryAfter.delay("Sun Nov  6 08:50:37 1994", now: now) == .seconds(60))
        #expect(RetryAfter.delay("Sun, 06 Nov 1994 08:00:00 GMT", now: now) == .zero)
    }

    @Test(arguments: ["", "-5", "1.5", "soon", "99999999999999999999", "Sun, 06 Nov 1994"])
    func rejectsMalformedRetryAfter(header: String) {
        #expect(RetryAfter.delay(header, now: Date()) == nil)
    }

    @Test func backsOffThenQueuesAgainAndAPauseDuringTheWaitWins() {
        var machine = Download.StateMachine()
        machine.started()
        #expect(machine.attemptEnded(.failed, retryDelay: .seconds(1)) == .scheduleRetry(after: .seconds(1)))
        #expect(machine.retryDue() == .enqueue)
        machine.started()
        #expect(machine.attempts == 2)
        _ = machine.attemptEnded(.failed, retryDelay: .seconds(2))
        #expect(machine.pause() == .stopRetryWaitAndReportPaused)
        #expect(machine.retryDue() == .none)
        #expect(machine.resume() == .enqueueAndReportResumed)
        #expect(machine.attempts == 0, "a resume by the caller gives a fresh set of attempts")
    }

    @Test func cancellingDuringTheWaitEndsTheTransfer() {
        var machine = Download.StateMachine()
        machine.started()
        _ = machine.attemptEnded(.failed, retryDelay: .seconds(1))
        #expect(machine.cancel() == .stopRetryWaitAndFinish(.cancelled))
        #expect(machine.retryDue() == .none)
    }

    @Test func aHeldHostStartsNothingUntilReleased() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 4, maximumPerHost: 4)
        scheduler.hold("h")
        #expect(scheduler.enqueue("a", host: "h") == [])
        #expect(scheduler.enqueue("b", host: "other") == ["b"])
        #expect(scheduler.release("h") == ["a"])
    }
}

@Suite("Following redirects")
struct RedirectTests {
    func transport(_ configure: (inout TransferManager.Configuration) -> Void = { _ in }) -> HTTPTransport {
        var configuration = TransferManager.Configuration()
        configure(&configuration)
        return HTTPTransport(client: HTTPClient.shared, configuration: configuration)
    }

    @Test func followsSeeOtherStatusesOnlyAfterAGetAndTemporaryOrPermanentOnesAfterAny() {
        for status: UInt in [301, 302, 303] {
            #expect(HTTPTransport.follows(status, after: .GET))
            #expect(!HTTPTransport.follows(status, after: .PUT))
        }
        for status: UInt in [307, 308] {
            #expect(HTTPTransport.follows(status, after: .GET))
            #expect(HTTPTransport.follows(status, after: .DELETE))
        }
        for status: UInt in [200, 204, 300, 304, 305, 306, 404] {
            #expect(!HTTPTransport.follows(status, after: .GET))
        }
    }

    @Test func resolvesRelativeLocationsAndKeepsSecretsWithinTheOrigin() throws {
        let hop = try self.transport().nextHop(
            from: URL(string: "https://a.example/x/y")!,
            location: "../z",
            status: 302,
            redirects: 0
        )
        #expect(hop.target.absoluteString == "https://a.example/z")
        #expect(!hop.dropsSecrets)
    }

    @Test(arguments: [
        ("https://a.example/f", "https://b.example/f"),
        ("https://a.example/f", "http://a.example/f"),
        ("https://a.example/f", "https://a.example:8443/f"),
    ])
    func dropsSecretsWhenLeavingTheOrigin(from: String, to: String) throws {
        let hop = try self.transport { $0.allowsInsecureRedirects = true }.nextHop(
            from: URL(string: from)!,
            location: to,
            status: 302,
            redirects: 0
        )
        #expect(hop.dropsSecrets)
    }

    @Test func refusesADowngradeFromHTTPSToHTTPUnlessAllowed() throws {
        #expect {
            _ = try self.transport().nextHop(
                from: URL(string: "https://a.example/f")!,
                location: "http://a.example/f",
                status: 301,
                redirects: 0
            )
        } throws: { ($0 as? HaulError)?.code == .redirectRefused }
    }

    @Test(arguments: ["file:///etc/passwd", "ftp://a.example/f", "gopher://x/"])
    func refusesSchemesOtherThanHTTP(location: String) {
        #expect {
            _ = try self.transport().nextHop(
                from: URL(string: "http://a.example/f")!,
                location: location,
                status: 302,
                redirects: 0
            )
        } throws: { ($0 as? HaulError)?.code == .redirectRefused }
    }

    @Test func keepsSecretsForATrustedHost() throws {
        let hop = try self.transport { $0.trustedRedirectHosts = ["cdn.example"] }.nextHop(
            from: URL(string: "https://a.example/f")!,
            location: "https://CDN.example/f",
            status: 302,
            redirects: 0
        )
        #expect(!hop.dropsSecrets)
    }

    @Test func takesOnlyStrongValidatorsFromAResponse() {
        var headers = HTTPHeaders([("ETag", "W/\"weak\""), ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")])
        #expect(Download.Validator(headers).ifRangeValue == nil, "no Date: Last-Modified may be weak")
        headers.add(name: "Date", value: "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(Download.Validator(headers).ifRangeValue == nil, "modified in the same second as the response: weak")
        headers.replaceOrAdd(name: "Date", value: "Sun, 06 Nov 1994 08:49:38 GMT")
        #expect(Download.Validator(headers).ifRangeValue == "Sun, 06 Nov 1994 08:49:37 GMT")
        headers.replaceOrAdd(name: "ETag", value: "\"strong\"")
        #expect(Download.Validator(headers).ifRangeValue == "\"strong\"")
        #expect(Download.Validator(headers).lastModified == nil, "the strong ETag is the validator; no date is parsed")
    }
}
