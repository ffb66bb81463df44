import Foundation

/// How a file downloaded into a folder is named.
///
/// Every name, whatever its source, passes through the same sanitiser: path separators, control characters and
/// leading dots are replaced, `.` and `..` are refused, and the name is cut to 255 bytes keeping its extension, so a
/// file can never land outside its destination folder.
public struct NamingPolicy: Sendable {
    enum Base: Sendable {
        case urlPath
        case contentDisposition
        case uuidPrefix
        case urlHash
        case custom(@Sendable (TransferID, URL) -> String)
    }
    let base: Base

    /// The last path component of the URL, percent-decoded (the default, as curl `-O` and wget do).
    public static let urlPath = NamingPolicy(base: .urlPath)
    /// The server's `Content-Disposition` file name when it sends one, else the URL's (curl `-J`, wget
    /// `--content-disposition`): the name at the end of what it offers (`../../etc/passwd` is `passwd`), sanitised.
    public static let contentDisposition = NamingPolicy(base: .contentDisposition)
    /// A UUID, a dash, and the URL's name (BHMultipleDownload), so names never collide.
    public static let uuidPrefix = NamingPolicy(base: .uuidPrefix)
    /// The SHA-256 of the URL in hex plus the URL's extension (BNDownload's cache names).
    public static let urlHash = NamingPolicy(base: .urlHash)
    /// A name of your choosing for an identifier and URL (HWIFileDownload's `localFileURLForIdentifier:remoteURL:`).
    ///
    /// The name may contain `/` to place the file in a subfolder; every component is sanitised and `..` is dropped.
    public static func custom(_ name: @escaping @Sendable (TransferID, URL) -> String) -> NamingPolicy {
        NamingPolicy(base: .custom(name))
    }
}
