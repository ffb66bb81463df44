import Foundation
import Testing

@testable import Haul

@Suite("Reading netrc files")
struct HostCredentialsTests {
    typealias Login = HostCredentials.Login

    @Test func readsMachinesAndTheDefaultAsCurlReadsThem() throws {
        let credentials = try HostCredentials(
            netrc: """
                # the archive
                machine Files.Example.com login ann password "two words \\" here"
                machine other.example
                    login bob
                    account unused
                    password p@ss
                macdef init
                cd /pub
                machine ignored.example login x password y

                machine files.example.com login later password ignored
                default login anonymous password me@example.com
                """
        )
        #expect(credentials.login(for: "files.example.com") == Login(user: "ann", password: "two words \" here"))
        #expect(credentials.login(for: "OTHER.example") == Login(user: "bob", password: "p@ss"))
        #expect(credentials.byHost["ignored.example"] == nil, "inside a macro")
        #expect(credentials.login(for: "elsewhere") == Login(user: "anonymous", password: "me@example.com"))
    }

    @Test(arguments: [
        ("machine a login ann", "netrc line 1: machine a needs a login and a password"),
        ("machine a login ann password", "netrc line 1: password needs a value"),
        ("machine a\nlogin ann\npasword x", "netrc line 3: unknown keyword \"pasword\""),
    ])
    func namesTheLineOfAnEntryItCannotUse(text: String, message: String) {
        #expect {
            try HostCredentials(netrc: text)
        } throws: { error in
            (error as? HaulError)?.message == message
        }
    }

    @Test func addsTheHostsLoginUnlessTheRequestHasAnAuthorization() throws {
        let credentials = HostCredentials(byHost: ["h.example": Login(user: "ann", password: "pw")])
        let url = URL(string: "https://h.example/a")!
        #expect(credentials.adding(to: [], for: url).map(\.value) == ["Basic YW5uOnB3"])
        #expect(credentials.adding(to: [("authorization", "Bearer t")], for: url).map(\.value) == ["Bearer t"])
        #expect(credentials.adding(to: [], for: URL(string: "https://other.example/a")!).isEmpty)
    }
}
