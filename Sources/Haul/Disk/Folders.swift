import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Folders made with their parents, failing with the system's reason (`Not a directory`, `Permission denied`):
/// Foundation's `createDirectory` reports a file in the way as `The operation could not be completed.
/// (NSCocoaErrorDomain error 512.)`.
enum Folders {
    /// Makes the folder at `path` and any parent it lacks; a folder there already is fine.
    /// - Throws: ``HaulError/Code/fileSystem`` naming the folder and the reason.
    static func make(_ path: String) throws(HaulError) {
        let code = Self.makeReturningError(path)
        guard code != 0 else { return }
        errno = code
        throw .posix("Cannot create the folder \(path)")
    }

    /// Makes `path` with its parents; the `errno` of the first failure, or 0.
    private static func makeReturningError(_ path: String) -> Int32 {
        if mkdir(path, 0o755) == 0 { return 0 }
        switch errno {
        case EEXIST:
            var status = stat()
            guard stat(path, &status) == 0 else { return errno }
            return (status.st_mode & S_IFMT) == S_IFDIR ? 0 : ENOTDIR
        case ENOENT:
            let parent = (path as NSString).deletingLastPathComponent
            guard !parent.isEmpty, parent != path else { return ENOENT }
            let code = Self.makeReturningError(parent)
            guard code == 0 else { return code }
            return mkdir(path, 0o755) == 0 || errno == EEXIST ? 0 : errno
        default:
            return errno
        }
    }
}
