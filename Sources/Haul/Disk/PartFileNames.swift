import Foundation
import NIOConcurrencyHelpers

/// The `.part` files that may be in a folder, so that a new file without a name (``PartialFile``) need not look for a
/// stale `.part` file of its own on disk each time: most of a batch's files have none.
///
/// A folder is read once, at its first file without a name; from then on, the `.part` files this process makes there
/// are added and those it renames or removes are taken out. What a folder may hold is then known in memory: what was
/// there when it was read (left by an earlier process) and what this process made since. A `.part` file that another
/// process makes there later is not known; that process's own run takes care of it.
final class PartFileNames: Sendable {
    /// The process's folders: every manager's files without a name look here.
    static let shared = PartFileNames()

    private struct Folder {
        /// Whether the folder has been read (it is being read while `false`).
        var isRead = false
        var names: Set<String> = []
    }

    private let folders = NIOLockedValueBox<[String: Folder]>([:])
    /// How many folders are remembered (a batch may spread its files over many): a file in a folder past it looks on
    /// disk, as every file did before.
    private let maximumFolders: Int

    init(maximumFolders: Int = 1024) {
        self.maximumFolders = maximumFolders
    }

    /// Whether a `.part` file may be at `path`: `true` when one was there when its folder was read, or this process
    /// made one there since (then look at the file itself); `false` when none can be.
    func mayExist(at path: String) -> Bool {
        let (folder, name) = Self.split(path)
        let known = self.folders.withLockedValue { folders -> Bool? in
            // Being read by another thread, or past the bound: look on disk.
            if let entry = folders[folder] { return entry.isRead ? entry.names.contains(name) : true }
            guard folders.count < self.maximumFolders else { return true }
            folders[folder] = Folder()
            return nil
        }
        if let known { return known }
        // Read outside the lock; what this process makes meanwhile is added to the entry just made (never removed).
        let found = Self.partNames(in: folder)
        return self.folders.withLockedValue { folders in
            folders[folder]!.names.formUnion(found)
            folders[folder]!.isRead = true
            return folders[folder]!.names.contains(name)
        }
    }

    /// Notes a `.part` file this process has made at `path` (in a folder already read or being read; another one
    /// finds it on disk when it is read).
    func made(_ path: String) {
        let (folder, name) = Self.split(path)
        self.folders.withLockedValue { folders in
            if folders[folder] != nil { folders[folder]!.names.insert(name) }
        }
    }

    /// Notes that the `.part` file at `path` is gone (renamed or removed by this process).
    func gone(_ path: String) {
        let (folder, name) = Self.split(path)
        self.folders.withLockedValue { folders in
            if folders[folder] != nil { folders[folder]!.names.remove(name) }
        }
    }

    /// The names ending in `.part` in `folder`: none when it cannot be read (missing: nothing is there yet).
    private static func partNames(in folder: String) -> Set<String> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return Set(names.filter { $0.hasSuffix(".part") })
    }

    static func split(_ path: String) -> (folder: String, name: String) {
        // Found as a byte in the path's contiguous bytes: searching the characters broke the whole path into graphemes
        // (half a percent of the event loops' CPU on 2,000 small files, where each file's path is split up to three
        // times), and `String.UTF8View`'s own `lastIndex(of:)` stepped back through the string's storage.
        var path = path
        return path.withUTF8 { bytes in
            guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else {
                return (".", String(decoding: bytes, as: UTF8.self))
            }
            let folder =
                slash == 0 ? "/" : String(decoding: UnsafeBufferPointer(rebasing: bytes[..<slash]), as: UTF8.self)
            return (folder, String(decoding: UnsafeBufferPointer(rebasing: bytes[(slash + 1)...]), as: UTF8.self))
        }
    }
}
