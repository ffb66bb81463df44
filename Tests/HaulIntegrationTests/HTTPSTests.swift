import Foundation
import Haul
import HaulTesting
import Testing

/// https goes through AsyncHTTPClient (plain http through Haul's own connections): these tests run the test server
/// with TLS, its certificate signed by ``TestCertificates/authority``, which no system trusts.
@Suite("Downloading over https", .timeLimit(.minutes(2)))
struct HTTPSTests {
    static let body = FaultInjectingServer.body(size: 300_000, seed: 31)
    static let resources: [String: FaultInjectingServer.Resource] = [
        "/a.bin": .init(body: Self.body), "/b.bin": .init(body: Self.body, chunkSize: 7_000),
    ]

    /// A configuration that trusts the test authority, written to a file in `folder` as a user's would be.
    static func trustingTheTestAuthority(in folder: URL) throws -> TransferManager.Configuration {
        let authority = folder.appending(path: "authority.pem")
        try Data(TestCertificates.authority.utf8).write(to: authority)
        var configuration = TransferManager.Configuration.testing()
        configuration.additionalTrustedCertificates = [authority]
        return configuration
    }

    @Test func filesFromAServerWhoseAuthorityIsTrustedArriveByteForByte() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources, tls: true) { server in
            try await withTemporaryDirectory { folder in
                let configuration = try Self.trustingTheTestAuthority(in: folder)
                let out = folder.appending(path: "out")
                try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download([server.url("/a.bin"), server.url("/b.bin")], into: out)
                }
                #expect(server.url("/a.bin").scheme == "https")
                #expect(report.completed.count == 2, "\(report.failed.map(\.error.message))")
                #expect(contents(of: out.appending(path: "a.bin")) == Self.body)
                #expect(contents(of: out.appending(path: "b.bin")) == Self.body)
            }
        }
    }

    @Test func aServerWhoseAuthorityIsNotTrustedFailsAtOnceAndSaysWhy() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources, tls: true) { server in
            try await withTemporaryDirectory { folder in
                let report = try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    try await manager.download([server.url("/a.bin")], into: folder)
                }
                let error = try #require(report.failed.first?.error)
                #expect(error.code == .tlsHandshakeFailed)
                #expect(error.message.hasPrefix("TLS handshake with 127.0.0.1:\(server.port) failed: "), "\(error)")
                #expect(error.message.contains("CERTIFICATE_VERIFY_FAILED"), "\(error.message)")
                #expect(report.items.first?.attempts == 1, "a certificate does not change on a retry")
                #expect(server.requests.isEmpty, "no request went out")
                #expect(names(in: folder).isEmpty)
            }
        }
    }

    @Test func withoutVerificationAnUntrustedServerServesTheFile() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources, tls: true) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                configuration.verifiesCertificates = false
                let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.download([server.url("/a.bin")], into: folder)
                }
                #expect(report.completed.count == 1)
                #expect(contents(of: folder.appending(path: "a.bin")) == Self.body)
            }
        }
    }

    @Test func aFileOfTrustedCertificatesThatHoldsNoneStopsTheManagerFromStarting() async throws {
        try await withTemporaryDirectory { folder in
            let notPEM = folder.appending(path: "not.pem")
            try Data("no certificate here\n".utf8).write(to: notPEM)
            for file in [notPEM, folder.appending(path: "missing.pem")] {
                var configuration = TransferManager.Configuration.testing()
                configuration.additionalTrustedCertificates = [file]
                let error = await #expect(throws: HaulError.self) {
                    try await TransferManager.withTransferManager(configuration: configuration) { _ in }
                }
                #expect(error?.code == .invalidRequest)
                #expect(error?.message.contains(file.path) == true, "\(error?.message ?? "")")
            }
        }
    }
}
