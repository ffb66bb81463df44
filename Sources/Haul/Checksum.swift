import Crypto

/// A digest a downloaded file must match before it is published.
public struct Checksum: Hashable, Sendable, CustomStringConvertible {
    /// A digest algorithm.
    public struct Algorithm: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Hashable, Sendable, CaseIterable {
            case sha256 = "sha-256", sha512 = "sha-512", sha1 = "sha-1", md5
        }
        fileprivate let base: Base

        /// SHA-256.
        public static let sha256 = Algorithm(base: .sha256)
        /// SHA-512.
        public static let sha512 = Algorithm(base: .sha512)
        /// SHA-1: broken for security, accepted to check against published lists.
        public static let sha1 = Algorithm(base: .sha1)
        /// MD5: broken for security, accepted to check against published lists.
        public static let md5 = Algorithm(base: .md5)

        /// The algorithm named as aria2c names them (`sha-256`, `sha-512`, `sha-1`, `md5`; `sha256` is accepted too).
        public init?(name: String) {
            let lowered = name.lowercased()
            guard
                let base = Base.allCases.first(where: {
                    $0.rawValue == lowered || $0.rawValue.replacingOccurrences(of: "-", with: "") == lowered
                })
            else {
                return nil
            }
            self.base = base
        }

        private init(base: Base) { self.base = base }

        /// The number of hex digits of a digest.
        var hexLength: Int {
            switch self.base {
            case .sha256: 64
            case .sha512: 128
            case .sha1: 40
            case .md5: 32
            }
        }

        public var description: String { self.base.rawValue }
    }

    /// The algorithm.
    public var algorithm: Algorithm
    /// The expected digest, lower-case hex.
    public var hexDigest: String

    /// Creates a checksum; `nil` when the hex digest is not of the algorithm's length or not hex.
    public init?(algorithm: Algorithm, hexDigest: String) {
        let lowered = hexDigest.lowercased()
        guard lowered.count == algorithm.hexLength, lowered.allSatisfy({ $0.isHexDigit }) else { return nil }
        self.algorithm = algorithm
        self.hexDigest = lowered
    }

    /// Parses `ALGO=HEX` as aria2c's `checksum=` option writes it, e.g. `sha-256=9f86d0...`.
    public init?(parsing text: String) {
        guard let equals = text.firstIndex(of: "="),
            let algorithm = Algorithm(name: String(text[..<equals]))
        else { return nil }
        self.init(algorithm: algorithm, hexDigest: String(text[text.index(after: equals)...]))
    }

    public var description: String { "\(self.algorithm)=\(self.hexDigest)" }
}

/// An incremental digest over one of the supported algorithms.
struct Digester: Sendable {
    private var hasher: any HashFunction & Sendable

    init(_ algorithm: Checksum.Algorithm) {
        switch algorithm.base {
        case .sha256: self.hasher = SHA256()
        case .sha512: self.hasher = SHA512()
        case .sha1: self.hasher = Insecure.SHA1()
        case .md5: self.hasher = Insecure.MD5()
        }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        self.hasher.update(bufferPointer: bytes)
    }

    /// The digest as lower-case hex.
    func finalize() -> String {
        String(hexOf: self.hasher.finalize())
    }
}
